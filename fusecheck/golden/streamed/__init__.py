"""Running a model's high-precision golden in pieces, so that it never needs a whole fp64 copy of the model.

`plan` finds the blocks, `upcast` swaps one piece's weights to fp64 and back, `guard` makes the weights
outside the running piece read and compute as their fp64 copies (or reports a leak, and the golden steps
aside to the whole copy), `golden` runs the streamed golden forward and backward, `per_block` judges each
block on eager's own input to it.
"""
