// A stand-in storage plugin for tests: layer refs resolve to folders given in
// the options ({ layers: { "name@version": "/abs/dir" } }). Plain JavaScript,
// so the compiled agent loads it by path like any third-party plugin.
export default function fixedLayers(options = {}) {
  const layers = options.layers ?? {};
  return {
    name: 'test-fixed-layers',
    apply(dsec) {
      dsec.hooks.resolveLayers.tapPromise({ name: 'test-fixed-layers', stage: -10 }, async (sandbox) => {
        sandbox.lowerDirs = sandbox.spec.layers.map((layer) => {
          const dir = layers[`${layer.name}@${layer.version}`];
          if (!dir) throw new Error(`test-fixed-layers: no folder for ${layer.name}@${layer.version}`);
          return dir;
        });
      });
    },
  };
}
