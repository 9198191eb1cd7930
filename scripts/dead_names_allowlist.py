"""Names vulture cannot see used, each with why (read by tests/test_dead_names.py; never imported).

Everything else vulture reports at 60% confidence in sglops/ is dead and goes. `_` stands for any object.
"""

# ruff: noqa: B018, F821

# Called by name by a library: http.server's handler, paramiko's host-key policy, io's file protocol, a
# module-level __getattr__ (PEP 562), tokenizers' and tarfile's attributes, socketserver's class options.
_.do_GET
_.do_POST
_.log_message
protocol_version
_.close_connection
request_queue_size
daemon_threads
_.missing_host_key
_.readable
_.REKEY_BYTES
_.REKEY_PACKETS
_.pre_tokenizer
_.decoder
_.mtime
_.linkname
# inspect.signature reads it: Invoke builds a task's flags from it
_.__signature__

# The stand-in torch and sgl_kernel the KV-cost model runs SGLang's own backend code against: SGLang's code
# calls these by name.
_.is_floating_point
_.is_tensor
layer_id
__getattr__
assign_req_to_token_pool_cpu
copy_all_layer_kv_cache_cpu

# Fields of records written as JSON (dataclasses.asdict / to_dict) and read by people, reports and tests.
# bench/identity.py Divergence: which repeat of a prompt diverged
repeat
# experiment/sweep_result.py
identity_line
# experiment/sweep_result.py
profile_run
# probe/launch_rules.py
mla_rule
# probe/launch_rules.py
sparse_rule
# probe/launch_rules.py
limits
# trace/diagnose.py
top_kernel
# trace/profile.py
gpu_telemetry
# kernel/build.py Arch: kernel.yaml's `selftest` command, run by name per stage
selftest
