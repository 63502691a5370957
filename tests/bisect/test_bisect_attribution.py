"""Attribution failures are one line, never an internal dump (issue 9, item 3)."""
from fusecheck.bisect.attribution import one_line


def test_output_spec_mismatch_is_one_readable_line():
    exc = AssertionError("output spec mismatch: [<function aot_stage1_graph_capture.<locals>.orig_flat_fn2 at "
                         "0x7f3a2c1b0e50>, <function create_fu\nmore lines")
    line = one_line(exc)
    assert "\n" not in line and "0x" not in line and "<function" not in line
    assert line.startswith("AssertionError: output spec mismatch")


def test_addresses_stripped_from_other_errors():
    line = one_line(RuntimeError("bad <torch.fx.graph_module.GraphModule object at 0xdeadbeef> here"))
    assert "0x" not in line and "GraphModule" in line
