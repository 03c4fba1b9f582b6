/**
 * The base of Layer, Environment and Fleet: a construct with a dsec name (its
 * id, exactly as given), the document section it synthesises into, and the
 * place in the user's program where it was made.
 */
import { Construct } from 'constructs';
import type { ErrorCode } from '../errors.js';
import { captureLocation, type CapturedLocation } from './source-location.js';

export type Section = 'layers' | 'environments' | 'fleets';

/** A problem a construct finds in itself; the App adds the path and location. */
export interface ConstructProblem {
  readonly code: ErrorCode;
  readonly message: string;
  /** Under the construct's document path, e.g. `layers/1` for an environment's second layer. */
  readonly subPath?: string;
}

/** Creation order across all trees, so "the second declaration" means the one made later. */
let created = 0;

export abstract class DsecConstruct extends Construct {
  /** The name in the document (`layers.<name>`). */
  readonly name: string;
  /** Where `new ...(...)` was called, for diagnostics. */
  readonly location: CapturedLocation | undefined;
  abstract readonly section: Section;
  /** When it was made relative to the other constructs. */
  readonly order: number;

  constructor(scope: Construct, id: string) {
    const existing = scope.node.tryFindChild(id);
    if (existing) {
      // constructs' own message does not say why a Layer and an Environment may not share a name.
      const kind = existing.constructor.name;
      throw new Error(
        `'${id}' is already used by a ${kind} in ${scope.node.path || 'the App'}: ids are unique within a scope, ` +
          'across kinds; give it another name or put it in its own Stack',
      );
    }
    super(scope, id);
    this.name = id;
    this.order = created++;
    this.location = captureLocation(this.node.root, new.target.name, id);
  }

  /** The plain document of this construct, as in dsec.yaml under its section. */
  abstract toDocument(): unknown;

  /** Problems only the construct tree can see (constructs of another App, say). */
  problems(): ConstructProblem[] {
    return [];
  }
}

/** Drops undefined properties, so synthesised documents hold only what was set. */
export function defined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, inner]) => inner !== undefined)) as T;
}
