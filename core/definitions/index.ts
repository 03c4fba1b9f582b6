/**
 * dsec/definitions: declare layers, environments and fleets in TypeScript.
 *
 * ```ts
 * import { App, Layer, Environment, Fleet } from 'dsec/definitions';
 * const app = new App();
 * const base = new Layer(app, 'base', { kind: 'base', version: '1.0.0', source: Layer.busybox() });
 * const shell = new Environment(app, 'shell', { layers: [base] });
 * new Fleet(app, 'workers', { environment: shell, replicas: 3 });
 * export default app;
 * ```
 *
 * `app.synth()` gives the same document a dsec.yaml holds; `dsec` loads a
 * dsec.ts through exactly the checks a dsec.yaml goes through.
 */
export { App, type AppProps, type ConstructSource, type SynthOptions } from './app.js';
export { Stack } from './stack.js';
export { Layer, type LayerBuildProps, type LayerProps } from './layer.js';
export { Environment, type EnvironmentProps } from './environment.js';
export { Fleet, type FleetProps } from './fleet.js';
export type { ConstructProblem } from './dsec-construct.js';
export type * from '../config/document.generated.js';
