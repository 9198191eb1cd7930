"""What is on a host: facts (GPUs, Python, versions) and probe scans of its SGLang/FlashInfer sources."""
