// llama.cpp's speed on a GGUF, for benchmarks/model_export.py: how long the file takes to load, and how fast it
// generates greedily on a fixed number of threads.
//
// Reads one JSON request on stdin: {"model": PATH, "prompt": [id, ...], "tokens": N, "threads": T, "repeats": R}
// and prints one JSON answer on stdout:
//   {"llama_cpp": {"release": ...}, "load_seconds": S,    loadModel + createContext (the binaries already loaded)
//    "runs": [{"seconds": S, "tokens": [id, ...]} per repeat]}
// where each run clears the context, evaluates the prompt and samples N tokens at temperature 0 (greedy), end-of-
// generation tokens included (as evaluate.mjs does): seconds is prompt in to the N-th token out, after one untimed
// run (the first allocates llama.cpp's compute buffers). The plain sampler path (no probabilities asked for): the
// figure is what an application of llama.cpp sees.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const request = JSON.parse(Buffer.concat(chunks).toString("utf8"));

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const loading = performance.now();
const model = await llama.loadModel({modelPath: request.model});
const context = await model.createContext({contextSize: 512, threads: {ideal: request.threads, min: request.threads}});
const loadSeconds = (performance.now() - loading) / 1000;
const sequence = context.getSequence();

async function generate() {
  await sequence.clearHistory();
  const tokens = [];
  const began = performance.now();
  for await (const token of sequence.evaluate(request.prompt, {temperature: 0, yieldEogToken: true})) {
    tokens.push(token);
    if (tokens.length === request.tokens) break;
  }
  return {seconds: (performance.now() - began) / 1000, tokens};
}

await generate();  // untimed: the first evaluation allocates the compute buffers
const runs = [];
for (let repeat = 0; repeat < request.repeats; repeat++) runs.push(await generate());

process.stdout.write(JSON.stringify({llama_cpp: llama.llamaCppRelease, load_seconds: loadSeconds, runs}) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
