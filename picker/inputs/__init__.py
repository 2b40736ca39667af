"""What users hand the tool, read at the edge into pydantic: workload profiles (``workload``,
through ``yamlio``), the hardware catalog (``hardware``), measurements (``measurements``) and the
verify-time curve a sweep measured (``verify_curve``). Imports nothing of the project but
``picker.errors``.
"""
