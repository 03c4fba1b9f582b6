// A test admission plugin: refuses any sandbox labelled `refuse=<reason>`.
export default function refuse() {
  return {
    name: 'test-refuse',
    apply(dsec) {
      dsec.hooks.admit.tapPromise({ name: 'test-refuse', stage: -100 }, async (sandbox) => sandbox.spec.labels.refuse);
    },
  };
}
