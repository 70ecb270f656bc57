automatic_dynamic_remote_pgo = None
