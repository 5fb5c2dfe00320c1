"""The unit-cost table both RTT models print (`rpcscope model`, `rpcscope run`, `rpcscope run --target`):
one row per unit cost of a model file's `params`, a cost per byte in ns, a unit not fitted with why.

    params_table(model_json["params"])
"""
from rpcscope.output import table


def params_table(params, out=None):
    table([{"unit cost": p["name"], "value": (f"{p['value'] * 1000:.3f} ns/byte" if p["unit"] == "us/byte"
                                              else f"{p['value']:.3f}") if p["fitted"] else "not fitted",
            "unit": p["unit"], "one count is": p["what"] if p["fitted"] else p["why_not"]} for p in params],
          ["unit cost", "value", "unit", "one count is"], out=out)
