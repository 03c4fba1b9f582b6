// A test backend `inert` with no snapshot tap: provisioning does nothing but
// report the sandbox running, so an agent can be asked for what this backend
// cannot do (a snapshot).
export default function inertBackend() {
  return {
    name: 'test-inert-backend',
    apply(dsec) {
      const tap = { name: 'test-inert-backend', stage: 0 };
      dsec.hooks.provision.for('inert').tapPromise(tap, async () => true);
      dsec.hooks.probe.for('inert').tapPromise(tap, async () => 'running');
    },
  };
}
