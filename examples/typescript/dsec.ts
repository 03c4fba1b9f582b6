/**
 * The quickstart in TypeScript: a busybox base layer, a small toolkit layer
 * on top, and a fleet of two container sandboxes of that environment.
 *
 *   npm run build            # dsec/definitions resolves to dist/ within the repo
 *   dsec synth               # the same JSON a dsec.yaml with this content gives
 *   dsec plan && dsec apply
 *   dsec sandbox exec <id> -- hello
 */
import { App, Environment, Fleet, Layer } from 'dsec/definitions';

const app = new App({ provider: { local: {} } });

// A root filesystem made from Debian's busybox-static on this machine.
const base = new Layer(app, 'base', { kind: 'base', version: '1.0.0', source: Layer.busybox() });

// ./toolkit holds bin/hello; relative paths resolve against this file's folder.
const hello = new Layer(app, 'hello', { kind: 'toolkit', version: '0.1.0', source: Layer.dir('./toolkit') });

const shell = new Environment(app, 'shell', {
  layers: [base, hello],
  env: { GREETING: 'hello from a dsec sandbox' },
});

new Fleet(app, 'workers', {
  environment: shell,
  replicas: 2,
  resources: { cpu: 0.25, memory: '64Mi', pids: 64 },
  // Identical pages of the two sandboxes are merged by the kernel (KSM); pausing one pushes its memory out.
  density: { memorySharing: true, reclaimOnPause: true },
  labels: { example: 'typescript' },
});

export default app;
