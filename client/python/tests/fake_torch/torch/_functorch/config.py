enable_remote_autograd_cache = None
