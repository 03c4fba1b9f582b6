/**
 * Where the agent's compiled entry point is: <package>/dist/core/agent/main.js,
 * the same whether the caller runs from dist/ (the CLI) or from the
 * TypeScript sources (tests, tsx).
 */
import path from 'node:path';
import { packageRoot } from '../util/package-files.js';

export function agentMainPath(): string {
  return path.join(packageRoot(), 'dist', 'core', 'agent', 'main.js');
}
