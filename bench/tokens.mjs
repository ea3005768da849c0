// Reads a JSON array of strings on stdin and prints, as JSON, how many o200k
// tokens each has (gpt-tokenizer, offline). bench/run installs the package.
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";

let input = "";
process.stdin.setEncoding("utf8");
for await (const chunk of process.stdin) input += chunk;
const texts = JSON.parse(input);
process.stdout.write(JSON.stringify(texts.map((text) => countTokens(text))) + "\n");
