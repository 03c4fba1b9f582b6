#!/usr/bin/env node
// The installed `dsec` command: the compiled CLI (npm run build makes dist/).
import { main } from '../dist/core/cli/main.js';

await main(process.argv);
