// Package tick measures the tick of the jiffies clock the shield program
// can run on: Jiffy is 1e9/CONFIG_HZ nanoseconds, read through the
// object's clock_probe program (jiffies against ktime, over growing
// intervals) and snapped to the HZ values Linux offers, once per process.
//
// It loads clock_probe alone, with the object's global data, never the
// shield program, and touches no map of a loaded shield; package shield
// sets the program's ns_per_jiffy and checks limits with what it returns.
package tick
