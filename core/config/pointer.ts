/**
 * Document paths are JSON pointers (`/fleets/web/replicas`), the form ajv
 * reports and the form users see in diagnostics. A name holding `/` or `~`
 * is escaped (`a/b` -> `a~1b`) so a path always splits back into its keys.
 */

export function escapeSegment(segment: string | number): string {
  return String(segment).replace(/~/g, '~0').replace(/\//g, '~1');
}

export function toPointer(segments: readonly (string | number)[]): string {
  return segments.map((segment) => `/${escapeSegment(segment)}`).join('');
}

export function parsePointer(pointer: string): string[] {
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** `/fleets/web` + `replicas` -> `/fleets/web/replicas`. */
export function childPointer(pointer: string, segment: string | number): string {
  return `${pointer}/${escapeSegment(segment)}`;
}
