/**
 * YAML with source positions: the parsed data plus a Locator that finds the
 * node at a document path, so every diagnostic points at file:line:col.
 * Duplicate keys are reported as DSEC_CONFIG_DUPLICATE at the second key (the
 * value that wins, as in `yaml`); any other YAML error is DSEC_CONFIG_PARSE
 * and stops the load, since the data cannot be trusted after it.
 */
import {
  isMap,
  isPair,
  isScalar,
  isSeq,
  LineCounter,
  parseDocument,
  type Document,
  type Node,
  type Pair,
} from 'yaml';
import type { SourceLocation } from '../errors.js';
import { parsePointer, toPointer } from './pointer.js';
import { error, type Locator, type Problem } from './problems.js';

export interface YamlSource {
  readonly data: unknown;
  readonly problems: Problem[];
  /** True when the text is not YAML at all: no check after parsing can be trusted. */
  readonly unreadable: boolean;
  readonly locate: Locator;
  /** The source text of a non-string scalar (`1.0` stays `1.0`, not `1`), for "got ..." in messages. */
  readonly sourceText: (path: string) => string | undefined;
}

export function parseYamlSource(file: string, text: string): YamlSource {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, uniqueKeys: true, prettyErrors: false });
  const position = (offset: number): SourceLocation => {
    const { line, col } = lineCounter.linePos(offset);
    return { file, line, col };
  };
  const problems: Problem[] = [];
  let unreadable = false;
  for (const yamlError of doc.errors) {
    if (yamlError.code === 'DUPLICATE_KEY') {
      const path = pathOfKeyAt(doc, yamlError.pos[0]);
      problems.push(error('DSEC_CONFIG_DUPLICATE', path, duplicateMessage(path), 'key'));
    } else {
      unreadable = true;
      problems.push(parseProblem(yamlError.message, yamlError.pos[0]));
    }
  }
  const locate: Locator = (path, at) => {
    const found = findNode(doc, parsePointer(path), at);
    return position(found?.range?.[0] ?? 0);
  };
  const sourceText = (path: string): string | undefined => {
    const node = findNode(doc, parsePointer(path), 'value');
    if (!isScalar(node) || typeof node.value === 'string' || !node.range) return undefined;
    return text.slice(node.range[0], node.range[1]).trim() || undefined;
  };
  return { data: unreadable ? undefined : doc.toJS(), problems, unreadable, locate, sourceText };

  // YAML's messages end with "at line L, column C" and a code excerpt; the location says it already.
  function parseProblem(message: string, offset: number): Problem {
    const short = message.split('\n')[0].replace(/ at line \d+, column \d+:?$/, '');
    return { ...error('DSEC_CONFIG_PARSE', '', `invalid YAML: ${short}`), location: position(offset) };
  }
}

/**
 * The node at a path. For mappings the last pair with the key wins (as in
 * the data). When the path goes further than the document, the deepest node
 * found stands in: a missing property is located at its parent mapping.
 */
function findNode(doc: Document, segments: readonly string[], at: 'key' | 'value'): Node | undefined {
  let node: Node | undefined = (doc.contents as Node | null) ?? undefined;
  for (const [index, segment] of segments.entries()) {
    const last = index === segments.length - 1;
    if (isMap(node)) {
      const pair = lastPair(node.items as Pair[], segment);
      if (!pair) return node;
      const key = pair.key as Node | undefined;
      if (last && at === 'key') return key ?? node;
      const value = pair.value as Node | null;
      // `name:` with nothing after it: point at the name, not at the empty spot after the colon.
      const empty = !value || (isScalar(value) && !!value.range && value.range[0] === value.range[1]);
      node = (empty ? key : value) ?? node;
    } else if (isSeq(node)) {
      const item = node.items[Number(segment)] as Node | undefined;
      if (!item) return node;
      node = item;
    } else {
      return node;
    }
  }
  return node;
}

function lastPair(pairs: readonly Pair[], key: string): Pair | undefined {
  for (let index = pairs.length - 1; index >= 0; index--) {
    const pair = pairs[index];
    if (isPair(pair) && keyText(pair.key) === key) return pair;
  }
  return undefined;
}

function keyText(key: unknown): string | undefined {
  if (isScalar(key)) return key.value === null ? '' : String(key.value);
  return undefined;
}

/** The document path of the mapping key that starts at `offset` (for duplicate-key errors). */
function pathOfKeyAt(doc: Document, offset: number): string {
  const walk = (node: unknown, segments: string[]): string[] | undefined => {
    if (isMap(node)) {
      for (const pair of node.items) {
        const key = pair.key as Node | undefined;
        const name = keyText(key);
        if (name === undefined) continue;
        if (key?.range?.[0] === offset) return [...segments, name];
        const inner = walk(pair.value, [...segments, name]);
        if (inner) return inner;
      }
    } else if (isSeq(node)) {
      for (const [index, item] of node.items.entries()) {
        const inner = walk(item, [...segments, String(index)]);
        if (inner) return inner;
      }
    }
    return undefined;
  };
  return toPointer(walk(doc.contents, []) ?? []);
}

const SECTION_NOUN: Record<string, string> = { layers: 'layer', environments: 'environment', fleets: 'fleet' };

function duplicateMessage(path: string): string {
  const segments = parsePointer(path);
  const name = segments[segments.length - 1] ?? '';
  const noun = segments.length === 2 ? SECTION_NOUN[segments[0]] : undefined;
  return noun
    ? `duplicate ${noun} '${name}': each ${noun} name is declared once (the later one would silently win)`
    : `duplicate key '${name}': each key appears once in a mapping (the later one would silently win)`;
}
