// A test density plugin: on `prepare`, gives a sandbox the process traits its
// labels name (`trait-memory-merge`, `trait-idle-cpu`), as density-memory and
// density-qos do from the spec.
export default function traitsFromLabels() {
  return {
    name: 'test-traits',
    apply(dsec) {
      dsec.hooks.prepare.tapPromise({ name: 'test-traits', stage: 10 }, async (sandbox) => {
        if (sandbox.spec.labels['trait-memory-merge']) sandbox.traits.memoryMerge = true;
        if (sandbox.spec.labels['trait-idle-cpu']) sandbox.traits.idleCpu = true;
      });
    },
  };
}
