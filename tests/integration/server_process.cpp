// being written this session
