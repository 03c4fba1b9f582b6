/**
 * Where this dsec package lives on disk, found by walking up from this file
 * to the package.json named "dsec". It is the same whether the code runs from
 * dist/ (the CLI) or from the TypeScript sources (tests, tsx), so the agent's
 * compiled entry point is always found at <package>/dist/core/agent/main.js.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = path.join(dir, 'package.json');
    if (existsSync(manifest)) {
      try {
        if ((JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'dsec') return dir;
      } catch {
        // not ours; keep walking
      }
    }
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`cannot find the dsec package above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

export function agentMainPath(): string {
  return path.join(packageRoot(), 'dist', 'core', 'agent', 'main.js');
}
