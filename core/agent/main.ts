#!/usr/bin/env node
/**
 * The node agent daemon:
 *
 *   node dist/core/agent/main.js --root DIR [--name NODE] [--plugins JSON] [--base-dir DIR] [--no-builtins] [--debug] [--reap-interval-ms N]
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
import path from 'node:path';
import { Dsec } from '../dsec.js';
import type { PluginRef } from '../model.js';
import { agentPluginRefs, loadPlugins, pluginsFingerprint } from '../plugins.js';
import { NodeAgent } from './agent.js';
import { AgentClient } from './client.js';
import { agentPaths, EXIT_ALREADY_RUNNING } from './layout.js';
import { fileLogger } from './log.js';
import { lockAgentRoot } from './root-lock.js';
import { createAgentServer } from './server.js';

interface Args {
  root: string;
  name?: string;
  plugins: PluginRef[];
  baseDir: string;
  builtins: boolean;
  debug: boolean;
  reapIntervalMs?: number;
}

function parseArgs(argv: readonly string[]): Args {
  const args: Partial<Args> & { plugins: PluginRef[] } = { plugins: [], builtins: true, debug: false };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = () => {
      const next = argv[++i];
      if (next === undefined) throw new Error(`${flag} needs a value`);
      return next;
    };
    if (flag === '--root') args.root = path.resolve(value());
    else if (flag === '--name') args.name = value();
    else if (flag === '--plugins') args.plugins = parsePluginRefs(value());
    else if (flag === '--base-dir') args.baseDir = path.resolve(value());
    else if (flag === '--no-builtins') args.builtins = false;
    else if (flag === '--debug') args.debug = true;
    else if (flag === '--reap-interval-ms') {
      const ms = Number(value());
      if (!Number.isInteger(ms) || ms < 0) throw new Error('--reap-interval-ms must be a whole number >= 0 (0: no reaper)');
      args.reapIntervalMs = ms;
    }
    else throw new Error(`unknown argument ${flag}`);
  }
  if (!args.root) throw new Error('--root DIR is required');
  return { ...args, root: args.root, baseDir: args.baseDir ?? args.root } as Args;
}

function parsePluginRefs(text: string): PluginRef[] {
  const parsed: unknown = JSON.parse(text);
  if (!Array.isArray(parsed)) throw new Error('--plugins must be a JSON array');
  return parsed.map((entry) => {
    if (typeof entry === 'string') return { name: entry, options: {} };
    if (entry && typeof entry === 'object' && typeof (entry as PluginRef).name === 'string') {
      return { name: (entry as PluginRef).name, options: (entry as PluginRef).options ?? {} };
    }
    throw new Error(`--plugins: ${JSON.stringify(entry)} is not {name, options}`);
  });
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
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
  const agent = new NodeAgent({ dsec, root: paths.root, name: args.name, reapIntervalMs: args.reapIntervalMs });
  await agent.start();

  let stopping = false;
  const shutdown = async (why: string) => {
    if (stopping) return;
    stopping = true;
    log.info(`agent stopping (${why}); sandboxes keep running`);
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
  });
  await server.listen();
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGHUP', () => log.info('SIGHUP ignored'));
  log.info(`agent listening on ${paths.socket}`);
}

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
