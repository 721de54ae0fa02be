//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -type vip_key -type vip -type backend -type flow -type conn -type lb_config -type lb_count -type lb_reason -type lb_flag -type lb_limits Xdplb xdplb.c
package bpf

// The compiler is pinned: clang-14 and llvm-strip-14, Debian 12's (ci/deps.sh
// installs them), so `make check-generate` can ask for the committed objects
// byte for byte.

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -type config -type source -type source_set -type bucket -type limit -type src_key -type lpm4_key -type lpm6_key -type list_value -type dst_key -type reason -type proto -type verdict -type credit -type clock -type config_flag -type traffic_class -type list_capacity -type dst_capacity -type list_verdict Shield shield.c
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" Storm storm.c
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -type svc_key -type svc -type backend -type addr -type xlat -type sock_lb -type range_key Lb lb.c
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" LbDestroy lb_destroy.c
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -type policy -type route -type rule -type pool_key -type conn -type ctl L7 l7.c
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -type flow_key -type flow_stats Probe probe.c
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -type walk_rec -type source_set -type source -type src_key Walk walk.c
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -type dispatcher_config Dispatcher dispatcher.c
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" XdpCount xdpcount.c
