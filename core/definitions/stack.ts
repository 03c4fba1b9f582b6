import { Construct } from 'constructs';

/**
 * A group of layers, environments and fleets, for structure only: names in
 * the document are the constructs' own ids, with no prefix, so
 * `new Layer(new Stack(app, 'tools'), 'hello', ...)` is layer `hello`. A name
 * declared in two stacks is a DSEC_CONFIG_DUPLICATE error at synth.
 */
export class Stack extends Construct {
  constructor(scope: Construct, id: string) {
    super(scope, id);
  }
}
