"""Real-width models with a few layers: what a user's model looks like to the streamed golden.

Why: the drawn grid (models/families.py) uses tiny widths, where every piece outside the blocks (embeddings,
tied heads, the shared T5 embedding) is smaller than a block and stays upcast for the whole run; at real
widths those pieces are larger than a block and are streamed like one. `benchmarks/streamed_vs_whole.py`
runs these with both goldens and requires the same golden to the bit. Random weights, nothing downloaded,
layers cut so that a CPU runs each in under a minute.
"""
import torch

from fusecheck.case import Case
from models.families import Logits
from models.hf import _transformers


def _ids(vocab: int, n: int) -> torch.Tensor:
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(0))


def build_gpt2_small() -> Case:
    """GPT-2 small's widths (768, vocab 50257, tied head), 4 layers."""
    tf = _transformers()
    cfg = tf.GPT2Config(n_layer=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return Case(Logits(tf.GPT2LMHeadModel(cfg), ("input_ids",), use_cache=False), (_ids(cfg.vocab_size, 32),),
                "gpt2_small_4l")


def build_t5_small() -> Case:
    """t5-small's widths (512, vocab 32128, one embedding shared by encoder, decoder and head), 3 + 2 layers."""
    tf = _transformers()
    cfg = tf.T5Config(num_layers=3, num_decoder_layers=2, dropout_rate=0.0)
    return Case(Logits(tf.T5ForConditionalGeneration(cfg), ("input_ids", "decoder_input_ids"), use_cache=False),
                (_ids(cfg.vocab_size, 24), _ids(cfg.vocab_size, 8)),
                "t5_small_3+2l")


def build_bert_base() -> Case:
    """BERT-base's widths (768, vocab 30522, tied MLM head), 3 layers."""
    tf = _transformers()
    cfg = tf.BertConfig(num_hidden_layers=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return Case(Logits(tf.BertForMaskedLM(cfg), ("input_ids",)), (_ids(cfg.vocab_size, 32),), "bert_base_3l")


def build_mixed_residual() -> Case:
    """The mixed-precision pattern of issue 27 at width 2048: an fp32 residual stream, each block fed the
    stream cast to a weight's dtype read outside the blocks, an embedding and head larger than a block."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc = torch.nn.LayerNorm(2048), torch.nn.Linear(2048, 2048)

        def forward(self, x):
            return self.fc(self.ln(x)).relu()

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = torch.nn.Embedding(32000, 2048), torch.nn.Linear(2048, 32000)
            self.layers = torch.nn.ModuleList(Block() for _ in range(6))

        def forward(self, ids):
            r = self.emb(ids).float()
            for layer in self.layers:
                r = r + layer(r.to(self.layers[0].fc.weight.dtype)).float()
            return self.head(r.to(self.head.weight.dtype))
    torch.manual_seed(0)
    return Case(Stack(), (_ids(32000, 16).expand(2, 16).contiguous(),), "mixed_residual_2048")
