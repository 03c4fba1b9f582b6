/**
 * Canonical JSON: object keys sorted, no whitespace, `undefined` members
 * dropped. Hashes (the fleet spec hash) and "did the content change?" checks
 * (the state serial) must not depend on the order keys were inserted in.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

/** Pretty JSON with sorted keys (2-space indent): `dsec synth`, byte-identical for the same input. */
export function stableStringify(value: unknown): string {
  return JSON.stringify(sortKeys(value), null, 2);
}

/** The same value with every object's keys in sorted order, for stable pretty-printing too. */
export function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object') return value;
  const sorted: Record<string, unknown> = {};
  for (const key of Object.keys(value).sort()) {
    const member = (value as Record<string, unknown>)[key];
    if (member !== undefined) sorted[key] = sortKeys(member);
  }
  return sorted;
}
