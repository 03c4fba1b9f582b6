/** The version of this dsec, written into plans and states. Kept in step with package.json by a unit test. */
export const DSEC_VERSION = '0.1.0';
