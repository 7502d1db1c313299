"""Test equipment run in vLLM's environment (which has peft): write a LoRA adapter, or score tokens through one.

``python peft_adapter.py write BASE OUT SEED`` writes a rank-8 adapter on q/v with random
(non-zero) weights; ``python peft_adapter.py logprobs BASE ADAPTER IDS_JSON START`` prints the
log-probs of ``ids[START:]`` under base+adapter. tracerl's own venv has no peft; vLLM's does.
"""

import json
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM


def main() -> None:
    command, base = sys.argv[1], sys.argv[2]
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if command == "write":
        torch.manual_seed(int(sys.argv[4]))
        config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        get_peft_model(model, config).save_pretrained(sys.argv[3])
        return
    adapted = PeftModel.from_pretrained(model, sys.argv[3]).eval()
    ids, start = json.loads(sys.argv[4]), int(sys.argv[5])
    with torch.no_grad():
        logits = adapted(torch.tensor([ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, -1)[torch.arange(start - 1, len(ids) - 1), torch.tensor(ids[start:])]
    print(json.dumps(logprobs.tolist()))


if __name__ == "__main__":
    main()
