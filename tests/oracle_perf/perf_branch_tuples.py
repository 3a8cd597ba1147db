# perf script -s: every sample, one JSON list per line: [event name, time, cpu, pid, tid, flags, ip, addr].
#
# Run by perf's embedded Python (tests/oracle_perf/test_real_quipper_pipe.py). perf 6.1 cannot print
# -F pid,tid,cpu,time,ip,addr,flags from a pipe whose first hardware event ('cycles') has no ADDR (and
# -F hw:... silently drops cpu and addr), so those two come from perf's sample dictionaries; time is
# written as perf prints it with --ns.
import json


def _time(ns):
    return "%d.%09d" % (ns // 1000000000, ns % 1000000000)


def process_event(param_dict):
    s = param_dict["sample"]
    flags = " ".join(str(s.get("flags_disp", "")).split())
    print(json.dumps([param_dict.get("ev_name"), _time(s["time"]), s["cpu"], s["pid"], s["tid"], flags, s["ip"],
                      s["addr"]]))


def auxtrace_error(*args):
    pass  # perf's own -F run reports the errors (its count depends on how perf prints the samples)


def trace_unhandled(event_name, context, event_fields_dict, *rest):
    pass
