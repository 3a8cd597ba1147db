"""perf.data reader: file mode, pipe mode, directory forms, records and feature sections.

    from ptexport.perfdata import open_perf_data
    with open_perf_data("perf.data") as pd:        # a file, "-" (stdin), a FIFO or a directory
        pd.attrs, pd.features, pd.auxtrace_info, pd.time_conv, pd.id_index
        for rec in pd.records():                   # file order, COMPRESSED expanded
            ...
        for rec in pd.records(types={RecordType.AUXTRACE}):   # only some kinds, the rest skipped unparsed
            ...
        for rec in pd.ordered_records():           # perf's delivery order (FINISHED_ROUND rounds)
            ...
        for off, type, misc, size in pd.iter_headers():   # the fast path
            ...
        pd.stats                                   # counts by perf's record names

Files are memory-mapped and parsed one record at a time; nothing builds a list of all records.
Errors are :class:`ptexport.errors.PerfDataError` / :class:`~ptexport.errors.TruncatedError` naming the
file, the absolute byte offset and the record (``perf.data+0x1f2c: record MMAP2: ...``).

Modules: ``constants`` (the ABI numbers, importable on their own), ``attr`` (perf_event_attr,
perf_config_terms), ``records`` (record classes and parsers), ``features`` (feature sections),
``auxtrace`` (AUXTRACE_INFO incl. Intel PT, TIME_CONV), ``reader`` (:class:`PerfData`).
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
    "open_perf_data", "perf_data_from_bytes", "PerfData", "RecordStats", "EventAttr", "perf_config_terms",
    "AuxtraceInfo", "IntelPTInfo", "TimeConv", "BuildIdEntry", "Record", "SampleId", "MmapRecord", "Mmap2Record",
    "CommRecord", "ForkRecord", "ExitRecord", "LostRecord", "LostSamplesRecord", "SampleRecord", "AuxRecord",
    "ItraceStartRecord", "SwitchRecord", "KsymbolRecord", "BpfEventRecord", "TextPokeRecord",
    "AuxOutputHwIdRecord", "CgroupRecord", "NamespacesRecord", "ThrottleRecord", "ReadRecord",
    "FinishedRoundRecord", "FinishedInitRecord", "IdIndexRecord", "IdIndexEntry", "AuxtraceInfoRecord",
    "AuxtraceRecord", "AuxtraceErrorRecord", "ThreadMapRecord", "CpuMapRecord", "StatConfigRecord",
    "StatRecord", "StatRoundRecord", "TimeConvRecord", "HeaderAttrRecord", "HeaderFeatureRecord",
    "EventUpdateRecord", "HeaderBuildIdRecord", "HeaderTracingDataRecord", "CompressedRecord", "UnknownRecord",
]
