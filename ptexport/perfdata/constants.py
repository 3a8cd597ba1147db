"""Numbers of the perf.data format and the perf_event ABI (linux/perf_event.h, tools/perf/util/event.h,
tools/perf/util/header.h, tools/perf/util/intel-pt.h).

Everything here is a plain IntEnum/IntFlag or int constant so other stages (sideband, the trace
generator) can import them without pulling in the reader.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

PERF_MAGIC2 = b"PERFILE2"
PERF_MAGIC2_SWAPPED = b"2ELIFREP"
FILE_HEADER_SIZE = 104  # magic, size, attr_size, attrs/data/event_types sections, 256-bit feature bitmap
PIPE_HEADER_SIZE = 16  # magic, size
RECORD_HEADER_SIZE = 8  # u32 type, u16 misc, u16 size
HEADER_FEAT_BITS = 256


class RecordType(IntEnum):
    """perf_event_header.type: kernel records (< 64) and perf's user records (>= 64)."""

    MMAP = 1
    LOST = 2
    COMM = 3
    EXIT = 4
    THROTTLE = 5
    UNTHROTTLE = 6
    FORK = 7
    READ = 8
    SAMPLE = 9
    MMAP2 = 10
    AUX = 11
    ITRACE_START = 12
    LOST_SAMPLES = 13
    SWITCH = 14
    SWITCH_CPU_WIDE = 15
    NAMESPACES = 16
    KSYMBOL = 17
    BPF_EVENT = 18
    CGROUP = 19
    TEXT_POKE = 20
    AUX_OUTPUT_HW_ID = 21
    # user records (tools/perf/util/event.h: enum perf_user_event_type)
    HEADER_ATTR = 64
    HEADER_EVENT_TYPE = 65
    HEADER_TRACING_DATA = 66
    HEADER_BUILD_ID = 67
    FINISHED_ROUND = 68
    ID_INDEX = 69
    AUXTRACE_INFO = 70
    AUXTRACE = 71
    AUXTRACE_ERROR = 72
    THREAD_MAP = 73
    CPU_MAP = 74
    STAT_CONFIG = 75
    STAT = 76
    STAT_ROUND = 77
    EVENT_UPDATE = 78
    TIME_CONV = 79
    HEADER_FEATURE = 80
    COMPRESSED = 81
    FINISHED_INIT = 82
    COMPRESSED2 = 83  # perf >= 6.14: COMPRESSED with an explicit data_size and 8-byte padding


PERF_RECORD_USER_TYPE_START = 64

#: perf's display names (perf_event__name(): what `perf report --stats` prints); user records
#: HEADER_ATTR/EVENT_TYPE/TRACING_DATA/BUILD_ID/FEATURE are shown without the HEADER_ prefix
RECORD_NAMES: dict[int, str] = {int(t): t.name.removeprefix("HEADER_") for t in RecordType}


class SampleType(IntFlag):
    """perf_event_attr.sample_type bits (PERF_SAMPLE_*)."""

    IP = 1 << 0
    TID = 1 << 1
    TIME = 1 << 2
    ADDR = 1 << 3
    READ = 1 << 4
    CALLCHAIN = 1 << 5
    ID = 1 << 6
    CPU = 1 << 7
    PERIOD = 1 << 8
    STREAM_ID = 1 << 9
    RAW = 1 << 10
    BRANCH_STACK = 1 << 11
    REGS_USER = 1 << 12
    STACK_USER = 1 << 13
    WEIGHT = 1 << 14
    DATA_SRC = 1 << 15
    IDENTIFIER = 1 << 16
    TRANSACTION = 1 << 17
    REGS_INTR = 1 << 18
    PHYS_ADDR = 1 << 19
    AUX = 1 << 20
    CGROUP = 1 << 21
    DATA_PAGE_SIZE = 1 << 22
    CODE_PAGE_SIZE = 1 << 23
    WEIGHT_STRUCT = 1 << 24


#: sample_type bits that appear in the sample_id_all trailer of non-sample records
SAMPLE_ID_ALL_BITS = (
    SampleType.TID | SampleType.TIME | SampleType.ID | SampleType.STREAM_ID | SampleType.CPU | SampleType.IDENTIFIER
)


class ReadFormat(IntFlag):
    """perf_event_attr.read_format bits (PERF_FORMAT_*)."""

    TOTAL_TIME_ENABLED = 1 << 0
    TOTAL_TIME_RUNNING = 1 << 1
    ID = 1 << 2
    GROUP = 1 << 3
    LOST = 1 << 4


class AttrFlag(IntEnum):
    """Bit positions in perf_event_attr's 64-bit flags word (offset 40)."""

    DISABLED = 0
    INHERIT = 1
    PINNED = 2
    EXCLUSIVE = 3
    EXCLUDE_USER = 4
    EXCLUDE_KERNEL = 5
    EXCLUDE_HV = 6
    EXCLUDE_IDLE = 7
    MMAP = 8
    COMM = 9
    FREQ = 10
    INHERIT_STAT = 11
    ENABLE_ON_EXEC = 12
    TASK = 13
    WATERMARK = 14
    PRECISE_IP = 15  # 2 bits: 15-16
    MMAP_DATA = 17
    SAMPLE_ID_ALL = 18
    EXCLUDE_HOST = 19
    EXCLUDE_GUEST = 20
    EXCLUDE_CALLCHAIN_KERNEL = 21
    EXCLUDE_CALLCHAIN_USER = 22
    MMAP2 = 23
    COMM_EXEC = 24
    USE_CLOCKID = 25
    CONTEXT_SWITCH = 26
    WRITE_BACKWARD = 27
    NAMESPACES = 28
    KSYMBOL = 29
    BPF_EVENT = 30
    AUX_OUTPUT = 31
    CGROUP = 32
    TEXT_POKE = 33
    BUILD_ID = 34
    INHERIT_THREAD = 35
    REMOVE_ON_EXEC = 36
    SIGTRAP = 37


class AttrType(IntEnum):
    """perf_event_attr.type for the generic PMUs (dynamic PMUs such as intel_pt have other numbers)."""

    HARDWARE = 0
    SOFTWARE = 1
    TRACEPOINT = 2
    HW_CACHE = 3
    RAW = 4
    BREAKPOINT = 5


class SoftwareEvent(IntEnum):
    CPU_CLOCK = 0
    TASK_CLOCK = 1
    PAGE_FAULTS = 2
    CONTEXT_SWITCHES = 3
    CPU_MIGRATIONS = 4
    PAGE_FAULTS_MIN = 5
    PAGE_FAULTS_MAJ = 6
    ALIGNMENT_FAULTS = 7
    EMULATION_FAULTS = 8
    DUMMY = 9
    BPF_OUTPUT = 10
    CGROUP_SWITCHES = 11


class HardwareEvent(IntEnum):
    CPU_CYCLES = 0
    INSTRUCTIONS = 1
    CACHE_REFERENCES = 2
    CACHE_MISSES = 3
    BRANCH_INSTRUCTIONS = 4
    BRANCH_MISSES = 5
    BUS_CYCLES = 6
    STALLED_CYCLES_FRONTEND = 7
    STALLED_CYCLES_BACKEND = 8
    REF_CPU_CYCLES = 9


#: perf_event_attr sizes by ABI version (PERF_ATTR_SIZE_VER0..8)
ATTR_SIZE_VER = (64, 72, 80, 96, 104, 112, 120, 128, 136)


class CpuMode(IntEnum):
    """perf_event_header.misc & PERF_RECORD_MISC_CPUMODE_MASK."""

    UNKNOWN = 0
    KERNEL = 1
    USER = 2
    HYPERVISOR = 3
    GUEST_KERNEL = 4
    GUEST_USER = 5


PERF_RECORD_MISC_CPUMODE_MASK = 0x7
PERF_RECORD_MISC_CPUMODE_UNKNOWN = 0
PERF_RECORD_MISC_KERNEL = 1
PERF_RECORD_MISC_USER = 2
PERF_RECORD_MISC_HYPERVISOR = 3
PERF_RECORD_MISC_GUEST_KERNEL = 4
PERF_RECORD_MISC_GUEST_USER = 5
PERF_RECORD_MISC_PROC_MAP_PARSE_TIMEOUT = 1 << 12
PERF_RECORD_MISC_MMAP_DATA = 1 << 13  # MMAP/MMAP2
PERF_RECORD_MISC_COMM_EXEC = 1 << 13  # COMM
PERF_RECORD_MISC_FORK_EXEC = 1 << 13  # FORK (perf internal)
PERF_RECORD_MISC_SWITCH_OUT = 1 << 13  # SWITCH/SWITCH_CPU_WIDE
PERF_RECORD_MISC_EXACT_IP = 1 << 14  # SAMPLE
PERF_RECORD_MISC_SWITCH_OUT_PREEMPT = 1 << 14  # SWITCH/SWITCH_CPU_WIDE
PERF_RECORD_MISC_MMAP_BUILD_ID = 1 << 14  # MMAP2
PERF_RECORD_MISC_EXT_RESERVED = 1 << 15

GUEST_CPUMODES = frozenset({PERF_RECORD_MISC_GUEST_KERNEL, PERF_RECORD_MISC_GUEST_USER})


class AuxFlag(IntFlag):
    """PERF_RECORD_AUX flags."""

    TRUNCATED = 0x01
    OVERWRITE = 0x02
    PARTIAL = 0x04
    COLLISION = 0x08


PERF_AUX_FLAG_PMU_FORMAT_TYPE_MASK = 0xFF00


class KsymbolType(IntEnum):
    UNKNOWN = 0
    BPF = 1
    OOL = 2


PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER = 1 << 0


class BpfEventType(IntEnum):
    UNKNOWN = 0
    PROG_LOAD = 1
    PROG_UNLOAD = 2


class NamespaceIndex(IntEnum):
    NET = 0
    UTS = 1
    IPC = 2
    PID = 3
    USER = 4
    MNT = 5
    CGROUP = 6
    TIME = 7


class AuxtraceType(IntEnum):
    """auxtrace_info.type (tools/perf/util/auxtrace.h: enum auxtrace_type)."""

    UNKNOWN = 0
    INTEL_PT = 1
    INTEL_BTS = 2
    CS_ETM = 3
    ARM_SPE = 4
    S390_CPUMSF = 5
    HISI_PTT = 6


class AuxtraceErrorType(IntEnum):
    ITRACE = 1
    MAX = 2


class IntelPTInfo(IntEnum):
    """Indexes into auxtrace_info.priv[] for Intel PT (tools/perf/util/intel-pt.h)."""

    PMU_TYPE = 0
    TIME_SHIFT = 1
    TIME_MULT = 2
    TIME_ZERO = 3
    CAP_USER_TIME_ZERO = 4
    TSC_BIT = 5
    NORETCOMP_BIT = 6
    HAVE_SCHED_SWITCH = 7
    SNAPSHOT_MODE = 8
    PER_CPU_MMAPS = 9
    MTC_BIT = 10
    MTC_FREQ_BITS = 11
    TSC_CTC_N = 12
    TSC_CTC_D = 13
    CYC_BIT = 14
    MAX_NONTURBO_RATIO = 15
    FILTER_STR_LEN = 16


INTEL_PT_AUXTRACE_PRIV_MAX = 17


class StatType(IntEnum):
    """PERF_RECORD_STAT_CONFIG tags."""

    AGGR_MODE = 0
    SCALE = 1
    INTERVAL = 2
    AGGR_LEVEL = 3


class EventUpdateType(IntEnum):
    UNIT = 0
    SCALE = 1
    NAME = 2
    CPUS = 3


class CpuMapType(IntEnum):
    CPUS = 0
    MASK = 1
    RANGE_CPUS = 2


class Feature(IntEnum):
    """perf.data feature section ids (HEADER_*), bit numbers in the file header's feature bitmap."""

    RESERVED = 0
    TRACING_DATA = 1
    BUILD_ID = 2
    HOSTNAME = 3
    OSRELEASE = 4
    VERSION = 5
    ARCH = 6
    NRCPUS = 7
    CPUDESC = 8
    CPUID = 9
    TOTAL_MEM = 10
    CMDLINE = 11
    EVENT_DESC = 12
    CPU_TOPOLOGY = 13
    NUMA_TOPOLOGY = 14
    BRANCH_STACK = 15
    PMU_MAPPINGS = 16
    GROUP_DESC = 17
    AUXTRACE = 18
    STAT = 19
    CACHE = 20
    SAMPLE_TIME = 21
    MEM_TOPOLOGY = 22
    CLOCKID = 23
    DIR_FORMAT = 24
    BPF_PROG_INFO = 25
    BPF_BTF = 26
    COMPRESSED = 27
    CPU_PMU_CAPS = 28
    CLOCK_DATA = 29
    HYBRID_TOPOLOGY = 30
    PMU_CAPS = 31


#: perf's lower-case feature names (the keys of PerfData.features)
FEATURE_NAMES: dict[int, str] = {int(f): f.name.lower() for f in Feature}

# HEADER_DIR_FORMAT version, HEADER_COMPRESSED types
PERF_DIR_VERSION = 1
PERF_COMP_NONE = 0
PERF_COMP_ZSTD = 1


class IntelPTConfig(IntEnum):
    """Bit positions of the intel_pt PMU's config terms (arch/x86/events/intel/pt.c format attributes)."""

    PT = 0
    CYC = 1
    PWR_EVT = 4
    FUP_ON_PTW = 5
    MTC = 9
    TSC = 10
    NORETCOMP = 11
    PTW = 12
    BRANCH = 13
    MTC_PERIOD = 14  # 4 bits: 14-17
    CYC_THRESH = 19  # 4 bits: 19-22
    PSB_PERIOD = 24  # 4 bits: 24-27
    EVENT = 31
    NOTNT = 55


#: term name -> (first bit, width) of the intel_pt config word, in perf's order
INTEL_PT_CONFIG_TERMS: dict[str, tuple[int, int]] = {
    "pt": (0, 1),
    "cyc": (1, 1),
    "pwr_evt": (4, 1),
    "fup_on_ptw": (5, 1),
    "mtc": (9, 1),
    "tsc": (10, 1),
    "noretcomp": (11, 1),
    "ptw": (12, 1),
    "branch": (13, 1),
    "mtc_period": (14, 4),
    "cyc_thresh": (19, 4),
    "psb_period": (24, 4),
    "event": (31, 1),
    "notnt": (55, 1),
}
