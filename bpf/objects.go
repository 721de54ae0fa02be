package bpf

// DispatcherObject is the object file of bpf/dispatcher.c, for tools that
// load a dispatcher by file: libxdp takes xdp-dispatcher.o from the
// directory LIBXDP_OBJECT_PATH names.
func DispatcherObject() []byte { return _DispatcherBytes }

// XdpCountObject is the object file of bpf/xdpcount.c, for xdp-loader.
func XdpCountObject() []byte { return _XdpCountBytes }
