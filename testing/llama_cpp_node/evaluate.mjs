// llama.cpp's own reading of a GGUF, for tests/trainer/test_to_gguf_llama_cpp.py (through tracerl_testing.llama_cpp).
//
// Reads one JSON request on stdin: {"model": PATH, "texts": [...], "prompts": [[id, ...], ...], "steps": N}
// and prints one JSON answer on stdout:
//   {"tokens": [[id, ...] per text],                  llama.cpp's tokenizer (special tokens in the text parsed, none added)
//    "runs": [{"logprobs": [...], "greedy": [...], "greedy_logprobs": [...]} per prompt]}
// where logprobs[i] is the log-probability llama.cpp gives prompt[i + 1] after prompt[..i], and greedy the
// N tokens it picks at temperature 0 after the whole prompt (no stop on end-of-generation tokens), with
// their log-probabilities. The prebuilt binaries only: build "never", so a missing one is an error, not a
// compile.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const request = JSON.parse(Buffer.concat(chunks).toString("utf8"));

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: request.model});
const context = await model.createContext({contextSize: 512, threads: 2});
const sequence = context.getSequence();
// the full next-token distribution, softmax of the raw logits (temperature 0 samples the argmax and leaves it as is)
const next = {generateNext: {token: true, probabilities: true, options: {temperature: 0}}};

function logprob(output, token) {
  const p = output.next.probabilities.get(token);
  return p === undefined ? null : Math.log(p);
}

const runs = [];
for (const prompt of request.prompts) {
  await sequence.clearHistory();
  const outputs = await sequence.controlledEvaluate(prompt.map((token) => [token, next]));
  const logprobs = prompt.slice(1).map((token, i) => logprob(outputs[i], token));
  let last = outputs.at(-1);
  const greedy = [];
  const greedyLogprobs = [];
  for (;;) {
    greedy.push(last.next.token);
    greedyLogprobs.push(logprob(last, last.next.token));
    if (greedy.length === request.steps) break;
    [last] = await sequence.controlledEvaluate([[last.next.token, next]]);
  }
  runs.push({logprobs, greedy, greedy_logprobs: greedyLogprobs});
}

const tokens = request.texts.map((text) => Array.from(model.tokenize(text, true)));
process.stdout.write(JSON.stringify({llama_cpp: llama.llamaCppRelease, tokens, runs}) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
