// A test backend `fnecho` standing in for an FnCall pool: its sandboxes do
// nothing, and its invoke tap answers each task with what it was given (as
// JSON on stdout), so the route from the CLI and the SDK to a backend's
// invoke tap is tested without the real pool. Code "sleep-forever" is a
// timed-out result; code "exit N" exits with N and writes "err" to stderr.
export default function echoFunctions() {
  return {
    name: 'test-echo-functions',
    apply(dsec) {
      const tap = { name: 'test-echo-functions', stage: 0 };
      dsec.hooks.provision.for('fnecho').tapPromise(tap, async () => true);
      dsec.hooks.probe.for('fnecho').tapPromise(tap, async () => 'running');
      dsec.hooks.invoke.for('fnecho').tapPromise(tap, async (call) => {
        const workers = call.node.sandboxes().filter((sandbox) => sandbox.spec.labels['dsec.io/fleet'] === call.fleet);
        const worker = workers[0]?.spec.id ?? 'none';
        const { task } = call;
        if (task.code === 'sleep-forever') {
          return { stdout: 'started\n', stderr: '', exitCode: null, timedOut: true, truncated: false, durationMs: task.timeoutMs ?? 30000, queuedMs: 0, worker };
        }
        const exit = /^exit (\d+)$/.exec(task.code);
        if (exit) return { stdout: '', stderr: 'err\n', exitCode: Number(exit[1]), timedOut: false, truncated: false, durationMs: 1, queuedMs: 0, worker };
        const stdout = `${JSON.stringify({ fleet: call.fleet, workers: workers.length, task })}\n`;
        return { stdout, stderr: '', exitCode: 0, timedOut: false, truncated: false, durationMs: 1, queuedMs: 0, worker };
      });
    },
  };
}
