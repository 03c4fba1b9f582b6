/**
 * The FnCall backend: a fleet with `backend: fncall` is a pool of workers
 * that run short stateless tasks (code + files in, stdout/stderr/exit code
 * out). Each worker is a container sandbox, made by the container backend
 * through the hook table with a ContainerShape (shape.ts): the guest agent
 * dsec-guest as PID 1 on a read-only stack of the environment's layers, with
 * capped tmpfs scratch. The agent keeps a connection to each worker's guest
 * agent and runs tasks through it (run-task.ts), queued per fleet and reset
 * between tasks (pool.ts).
 *
 *   provision  shape the sandbox, the container backend's provision, connect to the guest
 *   started    the worker joins its fleet's pool
 *   invoke     queue the task; a free worker runs it, is reset, takes the next
 *   exec, readFile, writeFile, update, probe, pause, resume, usage
 *              the container backend's taps, as for a container sandbox
 *   destroy    leave the pool; the container backend's destroy tap (which acts on
 *              shaped sandboxes) removes the container
 *   validate   (engine) an fncall fleet's backendOptions and memory
 *
 * It imports only the public plugin API, like any third-party backend.
 */
import {
  DsecError,
  LABEL_FLEET,
  STAGE,
  type Dsec,
  type DsecPlugin,
  type SandboxContext,
  type SandboxSpec,
} from '../../core/plugin-api.js';
import { connectWorker } from './guest-channel.js';
import { BACKEND_KIND, checkFleetOptions, parseOptions, PLUGIN_NAME, poolOptions, type BackendFncallOptions, type PoolOptions } from './options.js';
import { FncallPools } from './pool.js';
import { InterpreterCache, runTask } from './run-task.js';
import { findGuestBinary, socketOnHost, workerShape } from './shape.js';
import { prepareTask } from './task.js';

export { BACKEND_KIND, PLUGIN_NAME, type BackendFncallOptions } from './options.js';
export { RESET_PATHS, socketOnHost, workerShape } from './shape.js';

/** The backend the workers are made with. */
const CONTAINER = 'container';

export default function backendFncall(options: BackendFncallOptions = {}): DsecPlugin {
  const settings = parseOptions(options);
  return {
    name: PLUGIN_NAME,
    apply(dsec: Dsec) {
      const tap = { name: PLUGIN_NAME, stage: STAGE.BACKEND };
      const hooks = dsec.hooks;
      const interpreters = new InterpreterCache();
      const pools = new FncallPools({
        log: dsec.log,
        maxQueued: settings.maxQueued,
        run: ({ ctx, channel }, task) =>
          runTask(channel, task, {
            fleet: ctx.spec.labels[LABEL_FLEET] ?? '',
            workerId: ctx.spec.id,
            spec: ctx.spec,
            outputCapBytes: poolOptionsOf(ctx.spec).outputCapBytes,
            interpreters,
          }),
      });
      const container = (operation: string) => {
        if (!hooks.provision.get(CONTAINER)?.isUsed()) {
          throw new DsecError('DSEC_BACKEND_UNKNOWN', { backend: `${CONTAINER} (fncall workers are container sandboxes: load backend-container to ${operation} them)`, known: dsec.backends.join(', ') });
        }
      };

      hooks.provision.for(BACKEND_KIND).tapPromise(tap, async (sandbox) => {
        container('provision');
        const pool = checkedPoolOptions(sandbox);
        sandbox.container = workerShape(findGuestBinary(settings.guestPath), pool);
        const provisioned = await hooks.provision.for(CONTAINER).promise(sandbox);
        if (provisioned !== true) throw failure(sandbox, 'provision', 'the container backend did not report the worker running');
        const initPid = sandbox.backend.initPid;
        if (typeof initPid !== 'number') throw failure(sandbox, 'provision', "the container backend did not record the worker's init pid");
        pools.attach(sandbox, await connectWorker(socketOnHost(initPid), sandbox.spec.id, settings.connectTimeoutMs));
        return true;
      });
      hooks.started.tapPromise(tap, async (sandbox) => {
        if (sandbox.spec.backend === BACKEND_KIND) pools.ready(sandbox);
      });
      hooks.invoke.for(BACKEND_KIND).tapPromise(tap, async (call) =>
        pools.invoke(call.fleet, call.node, (spec) => prepareTask(call.fleet, call.task, { maxTimeoutMs: settings.maxTimeoutMs, pool: poolOptionsOf(spec) })),
      );

      // Everything else is the container backend's, as for any container sandbox.
      hooks.exec.for(BACKEND_KIND).tapPromise(tap, (sandbox, request, io) => hooks.exec.for(CONTAINER).promise(sandbox, request, io));
      hooks.update.for(BACKEND_KIND).tapPromise(tap, (sandbox, resources) => hooks.update.for(CONTAINER).promise(sandbox, resources));
      hooks.probe.for(BACKEND_KIND).tapPromise(tap, (sandbox) => hooks.probe.for(CONTAINER).promise(sandbox));
      hooks.pause.for(BACKEND_KIND).tapPromise(tap, (sandbox) => hooks.pause.for(CONTAINER).promise(sandbox));
      hooks.resume.for(BACKEND_KIND).tapPromise(tap, (sandbox) => hooks.resume.for(CONTAINER).promise(sandbox));
      hooks.usage.for(BACKEND_KIND).tapPromise(tap, (sandbox) => hooks.usage.for(CONTAINER).promise(sandbox));
      // The file calls only where the container backend has them (loaded before this plugin), so the node's capabilities say true.
      if (hooks.readFile.get(CONTAINER)?.isUsed()) {
        hooks.readFile.for(BACKEND_KIND).tapPromise(tap, (sandbox, request) => hooks.readFile.for(CONTAINER).promise(sandbox, request));
      }
      if (hooks.writeFile.get(CONTAINER)?.isUsed()) {
        hooks.writeFile.for(BACKEND_KIND).tapPromise(tap, (sandbox, request) => hooks.writeFile.for(CONTAINER).promise(sandbox, request));
      }

      // Before the container backend's destroy tap (STAGE.BACKEND), which acts on sandboxes with a shape:
      // a worker re-adopted after an agent restart has none in memory yet.
      hooks.destroy.tapPromise({ name: PLUGIN_NAME, stage: STAGE.BACKEND - 1 }, async (sandbox) => {
        if (sandbox.spec.backend !== BACKEND_KIND) return;
        pools.detach(sandbox);
        sandbox.container ??= workerShape(settings.guestPath ?? 'dsec-guest', poolOptionsOf(sandbox.spec));
      });

      // Engine side: a fleet's backendOptions and memory, located, at plan time.
      hooks.validate.tap(PLUGIN_NAME, (config, diagnostics) => diagnostics.push(...checkFleetOptions(config)));
    },
  };
}

function poolOptionsOf(spec: SandboxSpec): PoolOptions {
  return poolOptions(spec.backendOptions).options;
}

/** The fleet's pool settings; a bad one fails the create (the engine's validate should have caught it). */
function checkedPoolOptions(sandbox: SandboxContext): PoolOptions {
  const { options, problems } = poolOptions(sandbox.spec.backendOptions);
  if (problems.length > 0) throw failure(sandbox, 'provision', problems.map((problem) => `backendOptions.${problem.key} ${problem.message}`).join('; '));
  return options;
}

function failure(sandbox: SandboxContext, operation: string, message: string): DsecError {
  return new DsecError('DSEC_BACKEND_FAILED', { backend: BACKEND_KIND, operation, id: sandbox.spec.id, message });
}
