"""Build datasets/verilog/problems.jsonl, the `verilog` verifier's bundled problems (written for this project).

Each problem gives a spec, ports, the reference module body, the stimulus of a VerilogEval-style testbench,
a correct alternative implementation, a wrong one the testbench catches and, for some, a trap that passes the
testbench but is not equivalent (formal equivalence catches it). The testbench module itself (`tb`: clock,
RefModule vs TopModule on every clock edge, per-output hints, `Mismatches: N in M samples`) is generated
from the ports, as VerilogEval's are. Run `python scripts/make_verilog_dataset.py [--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "datasets" / "verilog" / "problems.jsonl"


def _ports(spec: str) -> list[tuple[str, int, str]]:
    """'input clk; input [7:0] a; output [8:0] s' -> [(direction, width, name)]."""
    out = []
    for part in spec.split(";"):
        words = part.split()
        if not words:
            continue
        direction, width = words[0], 1
        if words[1].startswith("["):
            high = int(words[1][1:].split(":")[0])
            width = high + 1
            words = words[:1] + words[2:]
        for name in " ".join(words[1:]).split(","):
            out.append((direction, width, name.strip()))
    return out


def _vec(width: int) -> str:
    return f"[{width - 1}:0] " if width > 1 else ""


def module(name: str, ports: str, body: str, reg_outputs: bool = False) -> str:
    """A module with ANSI ports (`output reg` for every output when `reg_outputs`)."""
    decl = []
    for direction, width, port in _ports(ports):
        kind = "output reg" if direction == "output" and reg_outputs else direction
        decl.append(f"  {kind} {_vec(width)}{port}")
    return f"module {name} (\n" + ",\n".join(decl) + "\n);\n" + body.strip("\n") + "\nendmodule\n"


def testbench(ports: str, stimulus: str) -> str:
    """A VerilogEval-style testbench: stimulus_gen drives the inputs, tb compares RefModule and TopModule."""
    parsed = _ports(ports)
    inputs = [(w, n) for d, w, n in parsed if d == "input" and n != "clk"]
    outputs = [(w, n) for d, w, n in parsed if d == "output"]
    has_clk = any(n == "clk" for _, _, n in parsed)
    stim_ports = ["  input clk"] + [f"  output reg {_vec(w)}{n}" for w, n in inputs]
    lines = [
        "`timescale 1 ps/1 ps",
        "",
        "module stimulus_gen (",
        ",\n".join(stim_ports),
        ");",
        "  integer cyc = 0;",
    ]
    lines += [stimulus.strip("\n"), "endmodule", "", "module tb();", "  reg clk = 0;"]
    lines += ["  initial forever #5 clk = ~clk;"]
    lines += [f"  logic {_vec(w)}{n};" for w, n in inputs]
    for w, n in outputs:
        lines += [f"  logic {_vec(w)}{n}_ref;", f"  logic {_vec(w)}{n}_dut;"]
    lines += ["  int errors = 0, errortime = 0, clocks = 0;"]
    lines += [f"  int errors_{n} = 0, errortime_{n} = 0;" for _, n in outputs]
    stim_conn = ", ".join([".clk(clk)"] + [f".{n}({n})" for _, n in inputs])
    conn_in = ([".clk(clk)"] if has_clk else []) + [f".{n}({n})" for _, n in inputs]
    lines.append(f"  stimulus_gen stim1 ({stim_conn});")
    lines.append("  RefModule good1 (" + ", ".join(conn_in + [f".{n}({n}_ref)" for _, n in outputs]) + ");")
    lines.append(
        "  TopModule top_module1 (" + ", ".join(conn_in + [f".{n}({n}_dut)" for _, n in outputs]) + ");"
    )
    ref_all = "{ " + ", ".join(f"{n}_ref" for _, n in outputs) + " }"
    dut_all = "{ " + ", ".join(f"{n}_dut" for _, n in outputs) + " }"
    lines.append("  wire tb_match;")
    lines.append(f"  assign tb_match = ( {ref_all} === ( {ref_all} ^ {dut_all} ^ {ref_all} ) );")
    lines += ["  always @(posedge clk, negedge clk) begin", "    clocks++;", "    if (!tb_match) begin"]
    lines += ["      if (errors == 0) errortime = $time;", "      errors++;", "    end"]
    for _, n in outputs:
        lines += [f"    if ({n}_ref !== ( {n}_ref ^ {n}_dut ^ {n}_ref )) begin"]
        lines += [f"      if (errors_{n} == 0) errortime_{n} = $time;", f"      errors_{n}++;", "    end"]
    lines += ["  end", "  final begin"]
    for _, n in outputs:
        lines.append(
            f"    if (errors_{n}) $display(\"Hint: Output '%s' has %0d mismatches. First mismatch occurred at "
            f'time %0d.", "{n}", errors_{n}, errortime_{n});'
        )
        lines.append(f'    else $display("Hint: Output \'%s\' has no mismatches.", "{n}");')
    lines += ['    $display("Hint: Total mismatched samples is %1d out of %1d samples\\n", errors, clocks);']
    lines += ['    $display("Simulation finished at %0d ps", $time);']
    lines += ['    $display("Mismatches: %1d in %1d samples", errors, clocks);', "  end"]
    lines += ["  initial begin", '    #1000000 $display("TIMEOUT");', "    $finish();", "  end", "endmodule"]
    return "\n".join(lines) + "\n"


def comb_stimulus(assign: str, count: int = 100, directed: str = "") -> str:
    """Directed values, then `count` random ones, one per clock edge, then $finish."""
    return f"""  initial begin
{directed}    repeat ({count}) @(posedge clk, negedge clk) begin
      {assign}
    end
    #1 $finish;
  end"""


P: list[dict] = []


def problem(
    pid: str,
    kind: str,
    reset: str,
    spec: str,
    ports: str,
    ref: str,
    stimulus: str,
    correct: str,
    wrong: str,
    trap: str | None = None,
    trap_note: str = "",
    reg: tuple[bool, bool, bool, bool] = (False,) * 4,
) -> None:
    """Add one problem; `reg` says which of ref, correct, wrong, trap declare `output reg`."""
    row = {
        "id": pid,
        "kind": kind,
        "reset": reset,
        "spec": spec.strip(),
        "reference": {
            "reference_module": module("RefModule", ports, ref, reg[0]),
            "testbench": testbench(ports, stimulus),
        },
        "correct": module("TopModule", ports, correct, reg[1]),
        "wrong": module("TopModule", ports, wrong, reg[2]),
        "trap": module("TopModule", ports, trap, reg[3]) if trap is not None else None,
        "trap_note": trap_note,
    }
    P.append(row)


# ---- combinational ---------------------------------------------------------------------------------------

problem(
    "add8_carry",
    "combinational",
    "none",
    "Add two 8-bit unsigned numbers a and b; sum is the 9-bit result including the carry out.",
    "input [7:0] a, b; output [8:0] sum",
    "  assign sum = a + b;",
    comb_stimulus("{a, b} <= $random;", 120, "    a <= 0; b <= 0;\n    @(negedge clk) {a, b} <= 16'hffff;\n"),
    "  always @(*) sum = {1'b0, a} + {1'b0, b};",
    "  assign sum = {1'b0, a + b};",
    "  assign sum = (a == 8'ha5 && b == 8'h3c) ? 9'h0e0 : a + b;",
    "wrong only for a=0xa5, b=0x3c",
    reg=(False, True, False, False),
)
problem(
    "mux4_nibble",
    "combinational",
    "none",
    "A 4-to-1 multiplexer of 4-bit inputs d0..d3 selected by sel (0 selects d0).",
    "input [1:0] sel; input [3:0] d0, d1, d2, d3; output [3:0] y",
    "  assign y = sel == 2'd0 ? d0 : sel == 2'd1 ? d1 : sel == 2'd2 ? d2 : d3;",
    comb_stimulus("{sel, d0, d1, d2, d3} <= $random;"),
    "  always @(*) case (sel) 2'd0: y = d0; 2'd1: y = d1; 2'd2: y = d2; default: y = d3; endcase",
    "  assign y = sel[1] ? (sel[0] ? d2 : d3) : (sel[0] ? d1 : d0);",
    reg=(False, True, False, False),
)
problem(
    "priority_low8",
    "combinational",
    "none",
    "Priority encoder: pos is the index of the lowest set bit of in (0 when in is 0); valid is 1 when any bit "
    "of in is set.",
    "input [7:0] in; output [2:0] pos; output valid",
    """  integer i;
  reg [2:0] p;
  always @(*) begin
    p = 3'd0;
    for (i = 7; i >= 0; i = i - 1) if (in[i]) p = i[2:0];
  end
  assign pos = p;
  assign valid = |in;""",
    comb_stimulus("in <= $random;", 100, "    in <= 0;\n    @(negedge clk) in <= 8'h80;\n"),
    """  always @(*) begin
    valid = in != 0;
    casez (in)
      8'b???????1: pos = 0; 8'b??????10: pos = 1; 8'b?????100: pos = 2; 8'b????1000: pos = 3;
      8'b???10000: pos = 4; 8'b??100000: pos = 5; 8'b?1000000: pos = 6; 8'b10000000: pos = 7;
      default: pos = 0;
    endcase
  end""",
    """  integer i;
  reg [2:0] p;
  always @(*) begin
    p = 3'd0;
    for (i = 0; i < 8; i = i + 1) if (in[i]) p = i[2:0];
  end
  assign pos = p;
  assign valid = |in;""",
    reg=(False, True, False, False),
)
problem(
    "popcount16",
    "combinational",
    "none",
    "count is the number of 1 bits in the 16-bit input in.",
    "input [15:0] in; output [4:0] count",
    """  integer i;
  reg [4:0] c;
  always @(*) begin
    c = 0;
    for (i = 0; i < 16; i = i + 1) c = c + in[i];
  end
  assign count = c;""",
    comb_stimulus("in <= $random;", 120, "    in <= 0;\n"),
    """  wire [2:0] n0 = in[0] + in[1] + in[2] + in[3];
  wire [2:0] n1 = in[4] + in[5] + in[6] + in[7];
  wire [2:0] n2 = in[8] + in[9] + in[10] + in[11];
  wire [2:0] n3 = in[12] + in[13] + in[14] + in[15];
  assign count = n0 + n1 + n2 + n3;""",
    """  integer i;
  reg [4:0] c;
  always @(*) begin
    c = 0;
    for (i = 0; i < 8; i = i + 1) c = c + in[i];
  end
  assign count = c;""",
    """  integer i;
  reg [4:0] c;
  always @(*) begin
    c = 0;
    for (i = 0; i < 16; i = i + 1) c = c + in[i];
    if (in == 16'hffff) c = 5'd15;
  end
  assign count = c;""",
    "counts 15 for the all-ones input",
)
problem(
    "compare_signed8",
    "combinational",
    "none",
    "Compare two 8-bit two's-complement numbers: lt when a < b, eq when a == b, gt when a > b.",
    "input [7:0] a, b; output lt, eq, gt",
    "  assign lt = $signed(a) < $signed(b);\n  assign eq = a == b;\n  assign gt = $signed(a) > $signed(b);",
    comb_stimulus("{a, b} <= $random;", 100, "    a <= 8'h80; b <= 8'h7f;\n"),
    """  wire signed [7:0] sa = a, sb = b;
  wire signed [8:0] d = sa - sb;
  assign eq = d == 0;
  assign lt = d[8];
  assign gt = !d[8] && d != 0;""",
    "  assign lt = a < b;\n  assign eq = a == b;\n  assign gt = a > b;",
)
problem(
    "decoder3_en",
    "combinational",
    "none",
    "3-to-8 decoder with enable: when en is 1, y has exactly bit sel set; when en is 0, y is 0.",
    "input en; input [2:0] sel; output [7:0] y",
    "  assign y = en ? (8'd1 << sel) : 8'd0;",
    comb_stimulus("{en, sel} <= $random;"),
    "  always @(*) begin\n    y = 8'd0;\n    if (en) y[sel] = 1'b1;\n  end",
    "  assign y = 8'd1 << sel;",
    reg=(False, True, False, False),
)
problem(
    "gray_to_binary8",
    "combinational",
    "none",
    "Convert the 8-bit Gray code g to binary b (b[7] = g[7], b[i] = b[i+1] ^ g[i]).",
    "input [7:0] g; output [7:0] b",
    """  genvar i;
  assign b[7] = g[7];
  generate for (i = 6; i >= 0; i = i - 1) begin : bits
    assign b[i] = b[i + 1] ^ g[i];
  end endgenerate""",
    comb_stimulus("g <= $random;"),
    "  integer i;\n  always @(*) for (i = 0; i < 8; i = i + 1) b[i] = ^(g >> i);",
    "  assign b = g ^ (g >> 1);",
    reg=(False, True, False, False),
)
problem(
    "abs_diff8",
    "combinational",
    "none",
    "d is the absolute difference |a - b| of two 8-bit unsigned numbers.",
    "input [7:0] a, b; output [7:0] d",
    "  assign d = a > b ? a - b : b - a;",
    comb_stimulus("{a, b} <= $random;", 120),
    "  wire [8:0] t = {1'b0, a} - {1'b0, b};\n  assign d = t[8] ? -t[7:0] : t[7:0];",
    "  assign d = a - b;",
    "  assign d = (a == 8'h77 && b == 8'h77) ? 8'd1 : (a > b ? a - b : b - a);",
    "reports 1 for a == b == 0x77",
)
problem(
    "parity_mask16",
    "combinational",
    "none",
    "p is the parity of the bits of data selected by mask (XOR of data & mask), inverted when odd is 0 "
    "(so p makes the selected bits plus p even when odd is 0, odd when odd is 1).",
    "input [15:0] data, mask; input odd; output p",
    "  assign p = ^(data & mask) ^ ~odd;",
    comb_stimulus("{odd, data, mask} <= {$random, $random};"),
    "  integer i;\n  reg t;\n  always @(*) begin\n    t = !odd;\n    for (i = 0; i < 16; i = i + 1) t = t ^ (data[i] & mask[i]);\n  end\n  assign p = t;",
    "  assign p = ^(data & mask) ^ odd;",
)
problem(
    "alu4",
    "combinational",
    "none",
    "4-bit ALU: op 0 adds, 1 subtracts (a - b), 2 ANDs, 3 XORs; y is the 4-bit result and zero is 1 when y "
    "is 0.",
    "input [1:0] op; input [3:0] a, b; output [3:0] y; output zero",
    """  reg [3:0] r;
  always @(*) case (op)
    2'd0: r = a + b;
    2'd1: r = a - b;
    2'd2: r = a & b;
    default: r = a ^ b;
  endcase
  assign y = r;
  assign zero = r == 4'd0;""",
    comb_stimulus("{op, a, b} <= $random;"),
    """  assign y = op[1] ? (op[0] ? a ^ b : a & b) : (op[0] ? a + ~b + 4'd1 : a + b);
  assign zero = ~|y;""",
    """  reg [3:0] r;
  always @(*) case (op)
    2'd0: r = a + b;
    2'd1: r = b - a;
    2'd2: r = a & b;
    default: r = a ^ b;
  endcase
  assign y = r;
  assign zero = r == 4'd0;""",
)
problem(
    "leading_zeros8",
    "combinational",
    "none",
    "lzc is the number of leading zero bits of in, counted from bit 7 (8 when in is 0).",
    "input [7:0] in; output [3:0] lzc",
    """  reg [3:0] n;
  integer i;
  always @(*) begin
    n = 4'd8;
    for (i = 0; i < 8; i = i + 1) if (in[i]) n = 7 - i;
  end
  assign lzc = n;""",
    comb_stimulus("in <= $random >> ($random & 7);", 100, "    in <= 0;\n"),
    """  always @(*) casez (in)
    8'b1???????: lzc = 0; 8'b01??????: lzc = 1; 8'b001?????: lzc = 2; 8'b0001????: lzc = 3;
    8'b00001???: lzc = 4; 8'b000001??: lzc = 5; 8'b0000001?: lzc = 6; 8'b00000001: lzc = 7;
    default: lzc = 8;
  endcase""",
    """  reg [3:0] n;
  integer i;
  always @(*) begin
    n = 4'd8;
    for (i = 7; i >= 0; i = i - 1) if (in[i]) n = 7 - i;
  end
  assign lzc = n;""",
    reg=(False, True, False, False),
)
problem(
    "saturating_add8",
    "combinational",
    "none",
    "sum is a + b for 8-bit unsigned a and b, saturated to 255 when the true sum does not fit.",
    "input [7:0] a, b; output [7:0] sum",
    "  wire [8:0] t = a + b;\n  assign sum = t[8] ? 8'hff : t[7:0];",
    comb_stimulus("{a, b} <= $random;", 120),
    "  assign sum = (a > 8'hff - b) ? 8'hff : a + b;",
    "  assign sum = a + b;",
)

# ---- sequential ------------------------------------------------------------------------------------------


def seq_stimulus(body: str, cycles: int = 100, reset: str = "") -> str:
    """Reset first (when named), then `cycles` cycles of random inputs at the falling edge, then $finish."""
    return f"""  initial begin
{reset}    repeat ({cycles}) @(negedge clk) begin
      {body}
    end
    #1 $finish;
  end"""


problem(
    "dff8_en_sync_reset",
    "sequential",
    "sync",
    "An 8-bit register: on the rising edge of clk, q becomes 0 when reset is 1, else d when en is 1; "
    "otherwise q keeps its value. reset is synchronous and active high.",
    "input clk, reset, en; input [7:0] d; output [7:0] q",
    "  always @(posedge clk) if (reset) q <= 8'd0; else if (en) q <= d;",
    seq_stimulus(
        "{en, d} <= $random; reset <= ($random & 15) == 0;",
        100,
        "    reset <= 1; en <= 0; d <= 0;\n    @(negedge clk) reset <= 0;\n",
    ),
    "  reg [7:0] r;\n  always @(posedge clk) r <= reset ? 8'd0 : (en ? d : r);\n  assign q = r;",
    "  always @(posedge clk) if (reset) q <= 8'd0; else q <= d;",
    reg=(True, False, True, False),
)
problem(
    "counter4_async_reset",
    "sequential",
    "async",
    "A 4-bit counter: areset (asynchronous, active high) clears q at once; on the rising edge of clk q "
    "increments when en is 1, wrapping from 15 to 0.",
    "input clk, areset, en; output [3:0] q",
    "  always @(posedge clk or posedge areset) if (areset) q <= 4'd0; else if (en) q <= q + 4'd1;",
    seq_stimulus(
        "en <= $random; areset <= (cyc % 8) == 7; cyc = cyc + 1;",
        100,
        "    areset <= 1; en <= 0;\n    @(negedge clk) areset <= 0;\n",
    ),
    "  always @(posedge clk, posedge areset) begin\n    if (areset) q <= 0;\n    else q <= q + {3'b0, en};\n  end",
    "  always @(posedge clk) if (areset) q <= 4'd0; else if (en) q <= q + 4'd1;",
    "  always @(posedge clk or posedge areset)\n    if (areset) q <= 4'd0;\n    else if (en) q <= (q == 4'd12) ? 4'd0 : q + 4'd1;",
    "wraps after 12; the testbench resets every 8 cycles, so it never counts past 7",
    reg=(True, True, True, True),
)
problem(
    "mod10_counter_sync",
    "sequential",
    "sync",
    "A decade counter: on each rising edge of clk, q counts 0, 1, ..., 9, 0, ...; reset (synchronous, active "
    "high) sets q to 0.",
    "input clk, reset; output [3:0] q",
    "  always @(posedge clk) if (reset || q == 4'd9) q <= 4'd0; else q <= q + 4'd1;",
    seq_stimulus("reset <= ($random & 31) == 0;", 100, "    reset <= 1;\n    @(negedge clk) reset <= 0;\n"),
    "  reg [3:0] n;\n  always @(posedge clk) n <= reset ? 4'd0 : (n >= 4'd9 ? 4'd0 : n + 4'd1);\n  assign q = n;",
    "  always @(posedge clk) if (reset) q <= 4'd0; else q <= q + 4'd1;",
    reg=(True, False, True, False),
)
problem(
    "shift8_async_low_reset",
    "sequential",
    "async",
    "An 8-bit shift register: rst_n (asynchronous, active low) clears q; on each rising edge of clk, q shifts "
    "left by one and sin enters at bit 0.",
    "input clk, rst_n, sin; output [7:0] q",
    "  always @(posedge clk or negedge rst_n) if (!rst_n) q <= 8'd0; else q <= {q[6:0], sin};",
    seq_stimulus(
        "sin <= $random; rst_n <= ($random & 31) != 0;",
        100,
        "    rst_n <= 0; sin <= 0;\n    @(negedge clk) rst_n <= 1;\n",
    ),
    "  always @(posedge clk, negedge rst_n) begin\n    if (~rst_n) q <= 0;\n    else begin\n      q <= q << 1;\n      q[0] <= sin;\n    end\n  end",
    "  always @(posedge clk or negedge rst_n) if (!rst_n) q <= 8'd0; else q <= {sin, q[7:1]};",
    reg=(True, True, True, False),
)
problem(
    "rise_detect8",
    "sequential",
    "sync",
    "For each bit of in, pe is 1 for one cycle after a rising edge clock samples in[i] = 1 where the previous "
    "sample was 0. reset (synchronous, active high) clears pe and the remembered previous value.",
    "input clk, reset; input [7:0] in; output [7:0] pe",
    "  reg [7:0] last;\n  always @(posedge clk) begin\n    if (reset) begin last <= 0; pe <= 0; end\n    else begin last <= in; pe <= in & ~last; end\n  end",
    seq_stimulus(
        "in <= $random; reset <= ($random & 31) == 0;",
        100,
        "    reset <= 1; in <= 0;\n    @(negedge clk) reset <= 0;\n",
    ),
    "  reg [7:0] prev, out;\n  always @(posedge clk) begin\n    prev <= reset ? 8'd0 : in;\n    out <= reset ? 8'd0 : (in & ~prev);\n  end\n  assign pe = out;",
    "  reg [7:0] last;\n  always @(posedge clk) begin\n    if (reset) begin last <= 0; pe <= 0; end\n    else begin last <= in; pe <= in ^ last; end\n  end",
    reg=(True, False, True, False),
)
problem(
    "detect_1011",
    "sequential",
    "sync",
    "z is 1 for the cycle after the last four bits sampled from x on rising clock edges were 1, 0, 1, 1 "
    "(overlapping: 1011011 detects twice). reset (synchronous, active high) returns to the initial state.",
    "input clk, reset, x; output z",
    """  reg [2:0] s;
  always @(posedge clk) begin
    if (reset) s <= 0;
    else case (s)
      3'd0: s <= x ? 3'd1 : 3'd0;
      3'd1: s <= x ? 3'd1 : 3'd2;
      3'd2: s <= x ? 3'd3 : 3'd0;
      3'd3: s <= x ? 3'd4 : 3'd2;
      default: s <= x ? 3'd1 : 3'd2;
    endcase
  end
  assign z = s == 3'd4;""",
    seq_stimulus(
        "x <= $random; reset <= ($random & 63) == 0;",
        120,
        "    reset <= 1; x <= 0;\n    @(negedge clk) reset <= 0;\n",
    ),
    "  reg [3:0] h;\n  reg [2:0] n;\n  always @(posedge clk) begin\n    if (reset) begin h <= 0; n <= 0; end\n    else begin h <= {h[2:0], x}; n <= (n == 3'd4) ? 3'd4 : n + 3'd1; end\n  end\n  assign z = n == 3'd4 && h == 4'b1011;",
    """  reg [2:0] s;
  always @(posedge clk) begin
    if (reset) s <= 0;
    else case (s)
      3'd0: s <= x ? 3'd1 : 3'd0;
      3'd1: s <= x ? 3'd1 : 3'd2;
      3'd2: s <= x ? 3'd3 : 3'd0;
      3'd3: s <= x ? 3'd4 : 3'd2;
      default: s <= x ? 3'd1 : 3'd2;
    endcase
  end
  assign z = s == 3'd3 && x;""",
)
problem(
    "lfsr8_async",
    "sequential",
    "async",
    "An 8-bit Fibonacci LFSR: areset (asynchronous, active high) loads 8'h01; on each rising edge of clk q "
    "shifts left and bit 0 becomes q[7] ^ q[5] ^ q[4] ^ q[3].",
    "input clk, areset; output [7:0] q",
    "  always @(posedge clk or posedge areset) if (areset) q <= 8'h01; else q <= {q[6:0], q[7] ^ q[5] ^ q[4] ^ q[3]};",
    seq_stimulus(
        "areset <= ($random & 63) == 0;", 100, "    areset <= 1;\n    @(negedge clk) areset <= 0;\n"
    ),
    "  wire fb = ^(q & 8'b1011_1000);\n  always @(posedge clk, posedge areset) q <= areset ? 8'h01 : {q[6:0], fb};",
    "  always @(posedge clk or posedge areset) if (areset) q <= 8'h01; else q <= {q[6:0], q[7] ^ q[6] ^ q[4] ^ q[3]};",
    reg=(True, True, True, False),
)
problem(
    "accumulator12",
    "sequential",
    "async",
    "A 12-bit accumulator: areset (asynchronous, active high) clears acc; on the rising edge of clk, clr "
    "(synchronous) clears acc, else acc adds din (8 bits, unsigned), wrapping modulo 4096.",
    "input clk, areset, clr; input [7:0] din; output [11:0] acc",
    "  always @(posedge clk or posedge areset) if (areset) acc <= 0; else if (clr) acc <= 0; else acc <= acc + din;",
    seq_stimulus(
        "din <= $random; clr <= (cyc % 12) == 11; cyc = cyc + 1;",
        120,
        "    areset <= 1; clr <= 0; din <= 0;\n    @(negedge clk) areset <= 0;\n",
    ),
    "  reg [11:0] a;\n  always @(posedge clk, posedge areset) begin\n    if (areset) a <= 12'd0;\n    else a <= clr ? 12'd0 : a + {4'd0, din};\n  end\n  assign acc = a;",
    "  always @(posedge clk or posedge areset) if (areset) acc <= 0; else acc <= acc + din;",
    "  wire [12:0] s = acc + din;\n  always @(posedge clk or posedge areset)\n    if (areset) acc <= 0; else if (clr) acc <= 0; else acc <= s[12] ? 12'hfff : s[11:0];",
    "saturates instead of wrapping; the testbench clears every 12 cycles, so the sum never passes 4095",
    reg=(True, False, True, True),
)
problem(
    "pulse_timer",
    "sequential",
    "sync",
    "A one-shot timer: when start is 1 on a rising edge of clk and the timer is idle, busy goes high for "
    "exactly 5 cycles. start while busy is ignored. reset (synchronous, active high) makes it idle.",
    "input clk, reset, start; output busy",
    "  reg [2:0] n;\n  always @(posedge clk) if (reset) n <= 0; else if (n != 0) n <= n - 3'd1; else if (start) n <= 3'd5;\n  assign busy = n != 0;",
    seq_stimulus(
        "start <= ($random & 3) == 0; reset <= ($random & 63) == 0;",
        120,
        "    reset <= 1; start <= 0;\n    @(negedge clk) reset <= 0;\n",
    ),
    "  reg [4:0] sh;\n  always @(posedge clk) begin\n    if (reset) sh <= 0;\n    else if (sh == 0) sh <= start ? 5'b11111 : 5'b0;\n    else sh <= sh >> 1;\n  end\n  assign busy = sh[0];",
    "  reg [2:0] n;\n  always @(posedge clk) if (reset) n <= 0; else if (start) n <= 3'd5; else if (n != 0) n <= n - 3'd1;\n  assign busy = n != 0;",
)
problem(
    "updown_sat3",
    "sequential",
    "sync",
    "A 3-bit up/down counter that saturates: on each rising edge of clk, up (and not down) increments q "
    "unless it is 7, down (and not up) decrements q unless it is 0; both or neither hold q. reset "
    "(synchronous, active high) sets q to 0.",
    "input clk, reset, up, down; output [2:0] q",
    "  always @(posedge clk) if (reset) q <= 0; else if (up && !down && q != 3'd7) q <= q + 3'd1; else if (down && !up && q != 3'd0) q <= q - 3'd1;",
    seq_stimulus(
        "{up, down} <= $random; reset <= ($random & 31) == 0;",
        120,
        "    reset <= 1; up <= 0; down <= 0;\n    @(negedge clk) reset <= 0;\n",
    ),
    "  always @(posedge clk) begin\n    if (reset) q <= 3'd0;\n    else case ({up, down})\n      2'b10: if (q < 3'd7) q <= q + 3'd1;\n      2'b01: if (q > 3'd0) q <= q - 3'd1;\n      default: ;\n    endcase\n  end",
    "  always @(posedge clk) if (reset) q <= 0; else if (up && !down) q <= q + 3'd1; else if (down && !up) q <= q - 3'd1;",
    reg=(True, True, True, False),
)
problem(
    "toggle_async_low",
    "sequential",
    "async",
    "A T flip-flop: arst_n (asynchronous, active low) clears q; on each rising edge of clk q toggles when t is 1.",
    "input clk, arst_n, t; output q",
    "  always @(posedge clk or negedge arst_n) if (!arst_n) q <= 1'b0; else if (t) q <= ~q;",
    seq_stimulus(
        "t <= $random; arst_n <= ($random & 15) != 0;",
        100,
        "    arst_n <= 0; t <= 0;\n    @(negedge clk) arst_n <= 1;\n",
    ),
    "  always @(posedge clk, negedge arst_n) q <= !arst_n ? 1'b0 : q ^ t;",
    "  always @(posedge clk) if (!arst_n) q <= 1'b0; else if (t) q <= ~q;",
    reg=(True, True, True, False),
)
problem(
    "regfile4x8",
    "sequential",
    "none",
    "Four 8-bit registers: on the rising edge of clk, when we is 1 register waddr takes wdata. rdata shows "
    "register raddr at all times (asynchronous read; a write shows after the clock edge). Registers start "
    "unknown.",
    "input clk, we; input [1:0] waddr, raddr; input [7:0] wdata; output [7:0] rdata",
    "  reg [7:0] mem [0:3];\n  always @(posedge clk) if (we) mem[waddr] <= wdata;\n  assign rdata = mem[raddr];",
    seq_stimulus(
        "{we, waddr, raddr, wdata} <= $random;", 120, "    we <= 0; waddr <= 0; raddr <= 0; wdata <= 0;\n"
    ),
    "  reg [7:0] r0, r1, r2, r3;\n  always @(posedge clk) if (we) case (waddr)\n    2'd0: r0 <= wdata; 2'd1: r1 <= wdata; 2'd2: r2 <= wdata; default: r3 <= wdata;\n  endcase\n  assign rdata = raddr == 2'd0 ? r0 : raddr == 2'd1 ? r1 : raddr == 2'd2 ? r2 : r3;",
    "  reg [7:0] mem [0:3];\n  always @(posedge clk) if (we) mem[waddr] <= wdata;\n  assign rdata = we && waddr == raddr ? wdata : mem[raddr];",
)
problem(
    "pwm16",
    "sequential",
    "sync",
    "A PWM generator: a free-running 4-bit counter cnt increments on each rising edge of clk (reset, "
    "synchronous and active high, clears it); pwm is 1 while cnt < duty.",
    "input clk, reset; input [3:0] duty; output pwm",
    "  reg [3:0] cnt;\n  always @(posedge clk) if (reset) cnt <= 0; else cnt <= cnt + 4'd1;\n  assign pwm = cnt < duty;",
    seq_stimulus(
        "if (($random & 15) == 0) duty <= $random; reset <= ($random & 63) == 0;",
        120,
        "    reset <= 1; duty <= 4'd5;\n    @(negedge clk) reset <= 0;\n",
    ),
    "  reg [3:0] c;\n  always @(posedge clk) c <= reset ? 4'd0 : c + 1'b1;\n  assign pwm = duty > c;",
    "  reg [3:0] cnt;\n  always @(posedge clk) if (reset) cnt <= 0; else cnt <= cnt + 4'd1;\n  assign pwm = cnt <= duty;",
)
problem(
    "running_parity",
    "sequential",
    "async",
    "p is the parity (XOR) of every bit of x sampled on rising clock edges since areset (asynchronous, active "
    "high) last cleared it.",
    "input clk, areset, x; output p",
    "  always @(posedge clk or posedge areset) if (areset) p <= 0; else p <= p ^ x;",
    seq_stimulus(
        "x <= $random; areset <= ($random & 31) == 0;",
        100,
        "    areset <= 1; x <= 0;\n    @(negedge clk) areset <= 0;\n",
    ),
    "  reg r;\n  always @(posedge clk, posedge areset) if (areset) r <= 1'b0; else if (x) r <= !r;\n  assign p = r;",
    "  always @(posedge clk or posedge areset) if (areset) p <= 0; else p <= x;",
    reg=(True, False, True, False),
)
problem(
    "traffic_light",
    "sequential",
    "sync",
    "A traffic light Moore machine with states GREEN (light = 2'b00) for 3 cycles, YELLOW (2'b01) for 1 "
    "cycle and RED (2'b10) for 2 cycles, repeating; a car waiting (car = 1) in RED skips its second cycle. "
    "reset (synchronous, active high) goes to the first cycle of GREEN.",
    "input clk, reset, car; output [1:0] light",
    """  reg [2:0] s;
  always @(posedge clk) begin
    if (reset) s <= 0;
    else case (s)
      3'd0, 3'd1, 3'd2: s <= s + 3'd1;
      3'd3: s <= 3'd4;
      3'd4: s <= car ? 3'd0 : 3'd5;
      default: s <= 3'd0;
    endcase
  end
  assign light = s <= 3'd2 ? 2'b00 : s == 3'd3 ? 2'b01 : 2'b10;""",
    seq_stimulus(
        "car <= $random; reset <= ($random & 63) == 0;",
        120,
        "    reset <= 1; car <= 0;\n    @(negedge clk) reset <= 0;\n",
    ),
    """  localparam G0 = 6'b000001, G1 = 6'b000010, G2 = 6'b000100, Y = 6'b001000, R0 = 6'b010000, R1 = 6'b100000;
  reg [5:0] st;
  always @(posedge clk) begin
    if (reset) st <= G0;
    else case (st)
      G0: st <= G1; G1: st <= G2; G2: st <= Y; Y: st <= R0;
      R0: st <= car ? G0 : R1;
      default: st <= G0;
    endcase
  end
  assign light = (st == Y) ? 2'b01 : (st == R0 || st == R1) ? 2'b10 : 2'b00;""",
    """  reg [2:0] s;
  always @(posedge clk) begin
    if (reset) s <= 0;
    else case (s)
      3'd0, 3'd1, 3'd2: s <= s + 3'd1;
      3'd3: s <= 3'd4;
      3'd4: s <= 3'd5;
      default: s <= 3'd0;
    endcase
  end
  assign light = s <= 3'd2 ? 2'b00 : s == 3'd3 ? 2'b01 : 2'b10;""",
)
problem(
    "gray_counter4",
    "sequential",
    "async",
    "A 4-bit Gray-code counter: areset (asynchronous, active high) sets g to 0; on each rising edge of clk "
    "with en = 1, g moves to the next value of the reflected Gray sequence (0000, 0001, 0011, 0010, ...).",
    "input clk, areset, en; output [3:0] g",
    "  reg [3:0] b;\n  always @(posedge clk or posedge areset) if (areset) b <= 0; else if (en) b <= b + 4'd1;\n  assign g = b ^ (b >> 1);",
    seq_stimulus(
        "en <= $random; areset <= ($random & 63) == 0;",
        120,
        "    areset <= 1; en <= 0;\n    @(negedge clk) areset <= 0;\n",
    ),
    """  reg [3:0] gg;
  wire [3:0] bin = {gg[3], gg[3] ^ gg[2], gg[3] ^ gg[2] ^ gg[1], gg[3] ^ gg[2] ^ gg[1] ^ gg[0]};
  wire [3:0] nb = bin + 4'd1;
  always @(posedge clk, posedge areset) if (areset) gg <= 4'd0; else if (en) gg <= nb ^ (nb >> 1);
  assign g = gg;""",
    "  reg [3:0] b;\n  always @(posedge clk or posedge areset) if (areset) b <= 0; else if (en) b <= b + 4'd1;\n  assign g = b;",
)
problem(
    "serial_to_parallel",
    "sequential",
    "sync",
    "A 4-bit deserializer: after reset (synchronous, active high), each rising edge of clk shifts din into "
    "the low end of a register; every fourth bit, data shows the four bits received (first bit in data[3]) "
    "and valid is 1 for that cycle; otherwise valid is 0 and data holds its last value.",
    "input clk, reset, din; output [3:0] data; output valid",
    """  reg [1:0] n;
  reg [2:0] sh;
  always @(posedge clk) begin
    if (reset) begin n <= 0; valid <= 0; data <= 0; end
    else begin
      n <= n + 2'd1;
      sh <= {sh[1:0], din};
      valid <= n == 2'd3;
      if (n == 2'd3) data <= {sh, din};
    end
  end""",
    seq_stimulus(
        "din <= $random; reset <= ($random & 63) == 0;",
        120,
        "    reset <= 1; din <= 0;\n    @(negedge clk) reset <= 0;\n",
    ),
    """  reg [3:0] buffer;
  reg [1:0] count;
  reg [3:0] d;
  reg v;
  always @(posedge clk) begin
    if (reset) begin count <= 2'd0; d <= 4'd0; v <= 1'b0; end
    else begin
      buffer <= {buffer[2:0], din};
      count <= count + 2'd1;
      v <= &count;
      if (&count) d <= {buffer[2:0], din};
    end
  end
  assign data = d;
  assign valid = v;""",
    """  reg [1:0] n;
  reg [2:0] sh;
  always @(posedge clk) begin
    if (reset) begin n <= 0; valid <= 0; data <= 0; end
    else begin
      n <= n + 2'd1;
      sh <= {sh[1:0], din};
      valid <= n == 2'd3;
      if (n == 2'd3) data <= {din, sh};
    end
  end""",
    reg=(True, False, True, False),
)


def main() -> None:
    """Write the problems as JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as handle:
        for row in P:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
    print(f"wrote {len(P)} problems to {args.out}")


if __name__ == "__main__":
    main()
