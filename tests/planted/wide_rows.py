"""A target wide enough that a GPU's matmul kernels may split their reductions by batch size: two 1024-wide
linear layers with a GELU and a LayerNorm, on a batch of 16 rows. The promise tests run it on CUDA, where
batch invariance is not free (cuBLAS and Triton pick kernels, split-K among them, by the batch's size)."""
import torch

BATCH = 16


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
                                torch.nn.LayerNorm(1024))
    return model, (torch.randn(BATCH, 1024),)
