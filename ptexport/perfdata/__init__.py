"""perf.data reader: file mode, pipe mode, directory forms, records and feature sections.

    from ptexport.perfdata import open_perf_data
    with open_perf_data("perf.data") as pd:
        for rec in pd.records():
            ...

Layout: ``constants`` (the ABI numbers), ``attr`` (perf_event_attr), ``records`` (record classes and
parsers), ``features`` (feature sections), ``auxtrace`` (AUXTRACE_INFO / TIME_CONV), ``reader``
(:class:`PerfData`).
"""

from ptexport.perfdata.attr import EventAttr, perf_config_terms
from ptexport.perfdata.auxtrace import AuxtraceInfo, IntelPTInfo, TimeConv
from ptexport.perfdata.features import BuildIdEntry
from ptexport.perfdata.reader import PerfData, RecordStats, open_perf_data, perf_data_from_bytes
from ptexport.perfdata.records import (
    AuxOutputHwIdRecord,
    AuxRecord,
    AuxtraceErrorRecord,
    AuxtraceInfoRecord,
    AuxtraceRecord,
    BpfEventRecord,
    CgroupRecord,
    CommRecord,
    CompressedRecord,
    CpuMapRecord,
    EventUpdateRecord,
    ExitRecord,
    FinishedInitRecord,
    FinishedRoundRecord,
    ForkRecord,
    HeaderAttrRecord,
    HeaderBuildIdRecord,
    HeaderFeatureRecord,
    HeaderTracingDataRecord,
    IdIndexEntry,
    IdIndexRecord,
    ItraceStartRecord,
    KsymbolRecord,
    LostRecord,
    LostSamplesRecord,
    Mmap2Record,
    MmapRecord,
    NamespacesRecord,
    ReadRecord,
    Record,
    SampleId,
    SampleRecord,
    StatConfigRecord,
    StatRecord,
    StatRoundRecord,
    SwitchRecord,
    TextPokeRecord,
    ThreadMapRecord,
    ThrottleRecord,
    TimeConvRecord,
    UnknownRecord,
)

__all__ = [
    "open_perf_data", "perf_data_from_bytes", "PerfData", "RecordStats", "EventAttr", "perf_config_terms", "AuxtraceInfo",
    "IntelPTInfo", "TimeConv", "BuildIdEntry", "Record", "SampleId", "MmapRecord", "Mmap2Record",
    "CommRecord", "ForkRecord", "ExitRecord", "LostRecord", "LostSamplesRecord", "SampleRecord", "AuxRecord",
    "ItraceStartRecord", "SwitchRecord", "KsymbolRecord", "BpfEventRecord", "TextPokeRecord",
    "AuxOutputHwIdRecord", "CgroupRecord", "NamespacesRecord", "ThrottleRecord", "ReadRecord",
    "FinishedRoundRecord", "FinishedInitRecord", "IdIndexRecord", "IdIndexEntry", "AuxtraceInfoRecord",
    "AuxtraceRecord", "AuxtraceErrorRecord", "ThreadMapRecord", "CpuMapRecord", "StatConfigRecord",
    "StatRecord", "StatRoundRecord", "TimeConvRecord", "HeaderAttrRecord", "HeaderFeatureRecord",
    "EventUpdateRecord", "HeaderBuildIdRecord", "HeaderTracingDataRecord", "CompressedRecord", "UnknownRecord",
]
