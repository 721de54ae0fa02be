package serve

import (
	"log/slog"
	"reflect"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	svc "github.com/xdpshield/xdpshield/service"
)

// sdNotify tells systemd state (sd_notify(3)) when it started serve with
// Type=notify ($NOTIFY_SOCKET set); nothing happens otherwise.
func sdNotify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("sd_notify", keyErr, err)
	}
}

// watchdogEvery is how often serve tells systemd it is alive: half of
// WatchdogSec= (sd_watchdog_enabled(3)), zero without a watchdog.
func watchdogEvery(log *slog.Logger) time.Duration {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog", keyErr, err)
		return 0
	}
	return d / 2
}

// reloadKeys name the configuration's parts a reload does not apply, by
// the service's field: they take effect at the next restart.
var reloadKeys = map[string]string{"Iface": "iface", "Mode": "mode", "Dispatcher": "dispatcher", "RunPrio": "run_priority", "PinRoot": "pin_root", "TableSize": "table_size",
	"Clock": "clock", "SpoofOwnAddresses": "lists.own_addresses_spoofed", "API": "[api]", "LB": "[lb]", "L7": "[l7]"}

// restartOnly names what differs between the running configuration and
// the reloaded one that a reload does not apply.
func restartOnly(running, next svc.Config) []string {
	var keys []string
	a, b := reflect.ValueOf(running), reflect.ValueOf(next)
	for i := range a.NumField() {
		key, ok := reloadKeys[a.Type().Field(i).Name]
		if ok && !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			keys = append(keys, key)
		}
	}
	return keys
}
