/** "did you mean" for typos in property names and references. */

/** The closest candidate within a small edit distance, or undefined. */
export function closest(word: string, candidates: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  const limit = Math.max(1, Math.floor(word.length / 3));
  for (const candidate of candidates) {
    const distance = editDistance(word.toLowerCase(), candidate.toLowerCase());
    if (distance <= limit && distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/** ` (did you mean 'x'?)` or the empty string. */
export function didYouMean(word: string, candidates: Iterable<string>): string {
  const match = closest(word, candidates);
  return match === undefined ? '' : ` (did you mean '${match}'?)`;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min(previous[j] + 1, current[j - 1] + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length];
}

/** A value as a diagnostic shows it after "got": `'latest'`, `-3`, `a mapping with dir, tar`. */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'an empty value';
  if (typeof value === 'string') {
    const shown = value.length > 40 ? `${value.slice(0, 37)}...` : value;
    return `'${shown}'`;
  }
  if (Array.isArray(value)) return `a list of ${value.length} item(s)`;
  if (typeof value === 'object') {
    const keys = Object.keys(value);
    return keys.length === 0 ? 'an empty mapping' : `a mapping with ${keys.join(', ')}`;
  }
  return String(value);
}
