#!/usr/bin/env node
/**
 * The node agent daemon:
 *
 *   node dist/core/agent/main.js --root DIR [--name NODE] [--plugins JSON] [--base-dir DIR] [--no-builtins] [--debug] [--reap-interval-ms N]
 *       [--listen HOST:PORT --token-file FILE
 *        [--join URL[,URL...] [--advertise HOST:PORT] [--node-label k=v ...] [--lease-ttl SECONDS] [--prefix /dsec]]]
 *
 * `--listen` serves the API on TCP too, every request needing
 * `Authorization: Bearer <token>` (the token file's trimmed content, 16+
 * characters). `--join` registers the node in etcd under a lease (see
 * cluster-member.ts) before the Unix socket answers, so whoever waits for the
 * socket (startClusterAgent) finds the node registered.
 *
 * `--plugins` is a JSON array of PluginRef ({name, options}) loaded on top of
 * the built-ins (storage-local, backend-container); a ref with a built-in's
 * name replaces it, and a built-in storage plugin (storage-3fs) replaces the
 * default storage-local. `--no-builtins` loads only `--plugins`.
 *
 * SIGTERM / SIGINT / POST /v1/shutdown close the API and exit; the sandboxes
 * keep running, and the next agent on this root adopts them.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { Dsec } from '../dsec.js';
import { isDsecError } from '../errors.js';
import { agentPluginRefs, loadPlugins, pluginsFingerprint } from '../plugins.js';
import { NodeAgent } from './agent.js';
import { parseAgentArgs } from './args.js';
import { AgentClient } from './client.js';
import { readTokenFile, tokenFileIsShared } from './cluster-flags.js';
import { ClusterMember } from './cluster-member.js';
import { agentPaths, EXIT_ALREADY_RUNNING } from './layout.js';
import { fileLogger } from './log.js';
import { lockAgentRoot } from './root-lock.js';
import { createAgentServer } from './server.js';

async function main(): Promise<void> {
  const args = parseAgentArgs(process.argv.slice(2));
  // Read before anything starts: a bad token file is a startup error, never an open TCP port.
  const token = args.cluster ? readTokenFile(args.cluster.tokenFile) : undefined;
  const paths = agentPaths(args.root);
  mkdirSync(paths.root, { recursive: true, mode: 0o700 });
  chmodSync(paths.root, 0o700);
  const log = fileLogger(paths.logFile, { debug: args.debug });

  // The lock first: once held, no other agent of this root can be starting, so the pid file is ours to write.
  if (!(await lockAgentRoot(paths.root)) || (await anotherAgentServes(paths))) {
    log.info(`another agent already serves ${paths.root}; exiting`);
    process.exit(EXIT_ALREADY_RUNNING);
  }
  writeFileSync(paths.pidFile, `${process.pid}\n`, { mode: 0o600 });
  log.info(`agent starting: pid ${process.pid}, root ${paths.root}, node ${args.name ?? '(hostname)'}`);

  const dsec = new Dsec({ log });
  const refs = agentPluginRefs(args.plugins, args.builtins);
  dsec.use(...(await loadPlugins(refs, args.baseDir)));
  if (args.cluster && tokenFileIsShared(args.cluster.tokenFile)) log.warn(`${args.cluster.tokenFile} can be read by others than its owner; chmod 600 it`);
  const join = args.cluster?.join;
  // Made before the agent starts (it joins later): the agent's pools record the placements of what they make through it.
  let agentRef: NodeAgent | undefined;
  const member = join
    ? new ClusterMember({
        endpoints: join.endpoints,
        prefix: join.prefix,
        name: args.name ?? os.hostname(),
        address: join.advertise,
        labels: join.labels,
        leaseTtlSeconds: join.leaseTtlSeconds,
        nodeInfo: () => agentRef!.nodeInfo(),
        log,
      })
    : undefined;
  const agent = new NodeAgent({
    dsec,
    root: paths.root,
    name: args.name,
    reapIntervalMs: args.reapIntervalMs,
    ...(join ? { cluster: { address: join.advertise, labels: join.labels } } : {}),
    ...(member ? { placements: { record: (spec) => member.recordPlacement(spec), drop: (id) => member.dropPlacement(id) } } : {}),
  });
  agentRef = agent;
  await agent.start();

  let stopping = false;
  const shutdown = async (why: string) => {
    if (stopping) return;
    stopping = true;
    log.info(`agent stopping (${why}); sandboxes keep running`);
    // Leave first: the node disappears from the cluster before its API does.
    await member?.leave();
    await server.close().catch((error: Error) => log.warn(`closing the API: ${error.message}`));
    await agent.drain();
    removeOwnPidFile(paths.pidFile);
    log.info('agent stopped');
    process.exit(0);
  };
  const server = createAgentServer(agent, {
    socketPath: paths.socket,
    log,
    onShutdown: () => void shutdown('shutdown request'),
    identity: { plugins: pluginsFingerprint(refs, args.baseDir) },
    ...(args.cluster && token ? { tcp: { host: args.cluster.listen.host, port: args.cluster.listen.port, token } } : {}),
  });
  if (args.cluster) log.info(`agent listening on TCP ${await server.listenTcp()} (token required)`);
  if (member) {
    try {
      await member.join(JOIN_WAIT_MS);
    } catch (error) {
      // Another agent answers for this node name: serving beside it would split the node in two.
      if (!isDsecError(error, 'DSEC_AGENT_START')) throw error;
      log.warn(error.message);
      await server.close().catch(() => undefined);
      removeOwnPidFile(paths.pidFile);
      process.stderr.write(`${new Date().toISOString()} error agent failed to start: ${error.message}\n`);
      process.exit(1);
    }
  }
  await server.listen();
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGHUP', () => log.info('SIGHUP ignored'));
  log.info(`agent listening on ${paths.socket}`);
}

/** How long the first registration may wait for etcd before the agent serves anyway (and keeps trying). */
const JOIN_WAIT_MS = 10_000;

/** A live agent answering on the socket means: do not start a second one. */
async function anotherAgentServes(paths: ReturnType<typeof agentPaths>): Promise<boolean> {
  if (existsSync(paths.socket)) {
    const client = new AgentClient(paths.socket);
    try {
      await client.health({ timeoutMs: 2000 });
      return true;
    } catch {
      // a stale socket from an agent that died: removed when we listen
    } finally {
      client.close();
    }
  }
  return false;
}

function removeOwnPidFile(pidFile: string): void {
  if (Number.parseInt(readFileSafe(pidFile), 10) === process.pid) rmSync(pidFile, { force: true });
}

function readFileSafe(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

// A bug in one request's handling must not take every sandbox's API down:
// log it and keep serving (the records on disk stay the truth either way).
process.on('unhandledRejection', (reason) => {
  process.stderr.write(`${new Date().toISOString()} warn  unhandled rejection: ${(reason as Error)?.stack ?? String(reason)}\n`);
});
process.on('uncaughtException', (error) => {
  process.stderr.write(`${new Date().toISOString()} error uncaught exception (agent keeps running): ${error.stack ?? error.message}\n`);
});

main().catch((error: Error) => {
  process.stderr.write(`${new Date().toISOString()} error agent failed to start: ${error.stack ?? error.message}\n`);
  process.exit(1);
});
