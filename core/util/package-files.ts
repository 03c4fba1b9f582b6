/**
 * Files shipped beside the code (the JSON Schemas in `schemas/`). The same
 * module runs from `core/` under tsx and vitest and from `dist/core/` once
 * built, so the package root is found by walking up to dsec's package.json
 * rather than by a fixed number of `..`.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

let root: string | undefined;

export function packageRoot(): string {
  if (root) return root;
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = path.join(dir, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'dsec') {
      root = dir;
      return dir;
    }
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`dsec's package.json not found above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/** A JSON Schema from `schemas/`, parsed. */
export function readSchema(file: string): Record<string, unknown> {
  return JSON.parse(readFileSync(path.join(packageRoot(), 'schemas', file), 'utf8')) as Record<string, unknown>;
}
