"""``gpufeed diagnose PATH``: an I/O investigation in one command.

1. The storage: filesystem type (statfs magic), the mount and its options,
   the block device(s) under it with read_ahead_kb, scheduler and rotational
   flag, Lustre striping (``lfs getstripe``) when ``lfs`` is installed.
2. The data: file count, size histogram, share of small files, packed or
   not; sequential bandwidth, random 4 KiB read IOPS and small-file reads/s
   measured on a sample of the dataset's own files.
3. The consumer side: a DataLoader runs for a few seconds while GPU
   utilisation (NVML, else nvidia-smi) and disk throughput (/proc/diskstats)
   are sampled; the loader's bottleneck (``stats()["bottleneck"]``) and the
   shares it was judged on.

Then recommendations, each naming the measurement that triggered it.

With ``--embedding TABLE`` (alone or beside a dataset PATH) a section on an
embedding table: its shape, the tier counters after a short probe of
Zipf-distributed lookups, and whether lookups are bound by the source.

The modules, in that order: storage (step 1), survey (step 2's file
survey and the size units), measure (step 2's reads and step 3's loader
run), gpu (the utilisation sampler), recommend, embedding (the table
probe), and report (the driver
``diagnose()``, the text report and the command line). This package
re-exports their public names.
"""

from .embedding import embedding_judgement, embedding_lines, probe_embedding
from .measure import measure_random, measure_sequential, measure_small_files, run_consumer
from .recommend import recommend
from .report import add_arguments, diagnose, format_report, main_from_args
from .storage import (FILESYSTEM_MAGIC, NETWORK_FILESYSTEMS, block_devices, filesystem_type,
                      lustre_striping, mount_of, storage_info)
from .survey import GIB, KIB, MIB, SMALL_FILE_BYTES, jpeg_header, jpeg_survey, survey

__all__ = [
    # report
    "diagnose", "format_report", "add_arguments", "main_from_args",
    # storage
    "FILESYSTEM_MAGIC", "NETWORK_FILESYSTEMS", "filesystem_type", "mount_of", "block_devices",
    "lustre_striping", "storage_info",
    # survey
    "KIB", "MIB", "GIB", "SMALL_FILE_BYTES", "survey", "jpeg_header", "jpeg_survey",
    # measure
    "measure_sequential", "measure_random", "measure_small_files", "run_consumer",
    # recommend
    "recommend",
    # embedding
    "probe_embedding", "embedding_judgement", "embedding_lines",
]
