"""One exception type per failure class; every message names the offending item and the fix."""


class ApsftError(Exception):
    """Base class of every error the platform raises on purpose."""


class ConfigError(ApsftError):
    """A profile file is malformed, inconsistent or points at something missing."""


class HashMismatchError(ApsftError):
    """A stored artifact no longer matches the SHA-256 receipt written with it."""


class MissingArtifactError(ApsftError):
    """An artifact (or its receipt) that a stage needs has not been materialized."""


class TaskGenerationError(ApsftError):
    """A task generator was asked for something outside its domain."""


class ModelDirectoryError(ApsftError):
    """A local model directory is missing files or cannot be loaded."""


class ParityError(ApsftError):
    """The fast scoring instrument has not passed the parity gate (fail closed)."""


class BalanceError(ApsftError):
    """An arm would break the balanced design (rows per task, per cell, per arm): fail closed."""


class InfeasibleAssignmentError(ApsftError):
    """No complete assignment avoids every forbidden edge (the shuffle arm's assignment)."""


class SealError(ApsftError):
    """The evidence seal is missing, or something it binds changed since sealing (fail closed)."""


class AmendmentError(ApsftError):
    """The amendment log is malformed or its hash chain is broken."""


class AuditError(ApsftError):
    """A SQL audit file is not one parseable statement over the known views."""


class DeviceError(ApsftError):
    """A stage needs a device (e.g. CUDA) that this machine does not have."""


class KernelError(ApsftError):
    """A model's kernels on CUDA (Qwen3.5's linear attention) are missing or do not import, and the profile
    did not choose the reference kernels."""


class TrainingError(ApsftError):
    """Training cannot start or did not do what the protocol requires (targets, steps, adapter)."""


class BudgetError(ApsftError):
    """The estimated device-hours of the training matrix exceed the declared budget."""


class MergeError(ApsftError):
    """A merged model does not differ from its base in exactly the adapted weights."""


class StorePathError(ApsftError):
    """An artifact name or an inherited shard path that would reach outside its root."""


class AlertConfigError(ApsftError):
    """The alert webhook is not an http(s) URL."""


class StoreWriteError(ApsftError, OSError):
    """Writing an artifact failed (e.g. the disk is full); nothing of it was kept, no receipt counts it."""


class BankFormatError(ApsftError):
    """An inherited bank's index, receipt or shard is not in the shape `apsft export-bank` writes."""


class ObjectStoreError(ApsftError):
    """A request to the object store still failed after the client's own retries (named by URL)."""


class PlanError(ApsftError):
    """`apsft plan` cannot price the run as asked: a malformed rehearsal file, or a store it cannot read."""


class AnchorError(ApsftError):
    """The design anchor (`apsft freeze`) is refused, malformed, or the design changed after it without an amendment."""


class ReviewError(ApsftError):
    """A run would pass a review point (`apsft run --pause-after`) that was not resumed, or a resume is refused."""


class KeyMismatchError(ApsftError):
    """A bank shard was made under other settings than this run's (or its key was edited): refused, nothing written."""


class StoreOwnerError(ApsftError):
    """A store recorded for one profile was given a run of another (core/store_owner.py)."""


class ClusterError(ApsftError):
    """The Ray cluster a run was told to use cannot be reached, or has no device for its workers."""


class ExportError(ApsftError):
    """`apsft export-arms` is refused: no sealed arms in the store, a non-empty --out, an unknown --format, or a
    row its chat template cannot carry; nothing is written."""


class CompareError(ApsftError):
    """`apsft compare` is refused: a store that is not a finished experiment store (missing, not a store, no
    analysis yet), or an --out that is not a folder; nothing is written."""


class TraceImportError(ApsftError):
    """`apsft import-traces` is refused: an unreadable file, a bad row or field (an unknown, sealed or inherited task, a
    missing completion), more completions than the harvest's allowance, or a store that cannot take them; nothing
    is written."""


class TaskFileError(ApsftError):
    """A task file (`tasks.source`) is refused: a malformed row or field, a duplicate id, a cell short of the
    profile's count, or a checker that raises or judges its own answer wrong (by file, row and field); nothing is
    written."""
