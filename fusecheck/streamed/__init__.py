"""Running a model's high-precision golden in pieces, so that it never needs a whole fp64 copy of the model.

`plan` finds the blocks, `upcast` swaps one piece's weights to fp64 and back, `golden` runs the streamed
golden forward and backward, `per_block` judges each block on eager's own input to it.
"""
