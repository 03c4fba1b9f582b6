// Test plugin: for a sandbox labelled test.dsec.io/lose-cgroup, the memory
// cgroup the backend reported vanishes between the freeze and the reclaim
// (its `paused` tap runs before density-reclaim's), and comes back before
// the resume, so the reclaim's failure path can be tested on a real pause.
const NAME = 'test-lose-cgroup';
const LABEL = 'test.dsec.io/lose-cgroup';

export default {
  name: NAME,
  apply(dsec) {
    const tap = { name: NAME, stage: 0 };
    dsec.hooks.paused.tapPromise(tap, async (sandbox) => {
      if (!sandbox.spec.labels[LABEL] || !sandbox.cgroups?.memory) return;
      sandbox.backend = { ...sandbox.backend, realMemoryCgroup: sandbox.cgroups.memory };
      sandbox.cgroups = { ...sandbox.cgroups, memory: `${sandbox.cgroups.memory}-gone` };
    });
    dsec.hooks.resuming.tapPromise(tap, async (sandbox) => {
      const real = sandbox.backend.realMemoryCgroup;
      if (typeof real === 'string') sandbox.cgroups = { ...sandbox.cgroups, memory: real };
    });
  },
};
