"""The model's side of tracerl: training, serving and publishing (see README.md)."""

from tracerl.trainer.flash_attn_stand_in import install_kernel_stand_in

install_kernel_stand_in()  # before anything here imports transformers' models
