"""The tracers of a capture's traced runs: a UST session per run recording exactly its two processes,
the kernel collector (ftrace, perf or LTTng's kernel tracer) enabled around it, stopped, converted to
CTF with its clock aligned to the UST trace's, and the kept round's traces moved into the case.
"""
import shutil
import time
import types

from . import ftrace, leftovers, lttng, perf
from .processes import bt_count


class Tracing:
    """The tracers, for the Capture: it holds p, tb, out, tag, kernel, kernel_events, sessions, ust_dirs,
    case_perf, case_ftrace, stopped_perf, and devices()."""

    def ust_start(self, out_dir, calls, frags, pids):
        name = f"rpcs-capture-{self.tag}-{len(self.sessions)}-{int(time.time() * 1000) % 100000}"
        sub, num = lttng.ust_buffer_size(calls, frags)
        self.sessions.append(name)
        leftovers.note("lttng_sessions", name)
        self.ust_dirs[name] = out_dir
        for cmd in lttng.ust_session_commands(name, out_dir, sub, num, vpids=pids):
            lttng.run_lttng(cmd)
        lttng.run_lttng(["start", name])
        return name

    def ust_stop(self, name):
        lttng.stop_session(name)                # returns once every event recorded is on disk
        st = lttng.channel_stats(name).get(lttng.UST_CHANNEL, {"discarded_events": 0, "lost_packets": 0})
        # `lttng destroy` waits another half second for the session daemon to finish tearing the session
        # down (on this VM, whatever it held): two sessions a round, a minute and a half of a make run.
        # Not waiting is safe once the consumer daemon has closed the trace's files.
        lttng.run_lttng(["destroy", "--no-wait", name])
        self.sessions.remove(name)
        leftovers.forget("lttng_sessions", name)
        lttng.wait_files_closed(self.ust_dirs.pop(name))
        return st

    def trace_hook(self, ust_dir, calls, frags, got, kernel_dir=None):
        """A run_pair trace_hook: once both pids are known, a UST session recording into ust_dir (and,
        with kernel_dir, the kernel collector writing there); its stop() stops them and records the UST
        channel's losses in got["ust"], the kernel event set in got["kernel_events"] and what
        kernel_finish needs in got["kernel"]."""
        def hook(spid, cpid):
            shutil.rmtree(ust_dir, ignore_errors=True)
            name = self.ust_start(ust_dir, calls, frags, [spid, cpid])
            if kernel_dir is not None:
                got["kernel_events"] = self.kernel_start(kernel_dir, [spid, cpid])

            def stop():
                if kernel_dir is not None:
                    got["kernel"] = self.kernel_stop()
                got["ust"] = self.ust_stop(name)
            return stop
        return hook

    def kernel_event_set(self):
        """The perf or ftrace kernel collector's tracepoints for a traced run (perf.event_set)."""
        return perf.event_set(self.p["executors"], bool(self.tb["link"].get("rate_bit")),
                              available={e for e in perf.event_set(1, True, detail="full")
                                         if perf.tracepoint_available(e)},
                              detail=self.kernel_events)

    def kernel_start(self, out_dir, pids):
        """Start the kernel collector writing into out_dir (perf: out_dir/kernel.perf.data; ftrace:
        out_dir/kernel.ftrace, at kernel_stop; LTTng: out_dir/kernel)."""
        if self.kernel in ("perf", "ftrace"):
            # One recorder (a perf, or a tracefs instance) for traced runs that follow one another,
            # enabled around each, ended by kernel_release before the next run that is not traced (a
            # perf's tracepoints cost the calls even while disabled). In a case's rounds every traced
            # run is followed by an untraced one, so each has a recorder of its own.
            evs = self.kernel_event_set()
            if self.kernel == "perf":
                if self.case_perf is None:
                    work = self.out / ".perf"
                    self.case_perf = perf.PerfRecorder(work, work / "kernel.perf.data", evs, self.devices(),
                                                       persistent=True)
                    self.case_perf.start()
                rec = self.case_perf
            else:
                if self.case_ftrace is None:
                    self.case_ftrace = ftrace.FtraceRecorder(evs, self.devices())
                    self.case_ftrace.start()
                rec = self.case_ftrace
            rec.enable()
            self._perf_out = out_dir
            return evs
        if self.kernel == "lttng":
            name = f"rpcs-capture-k-{self.tag}-{len(self.sessions)}"
            evs = perf.event_set(self.p["executors"], False, detail=self.kernel_events)
            sysc = sorted({e.split("_", 2)[2] for e in evs if e.startswith("syscalls:")})
            self.sessions.append(name)
            leftovers.note("lttng_sessions", name)
            kernel_events = [e for e in evs if not e.startswith("syscalls:")]
            for cmd in lttng.lttng_kernel_commands(name, out_dir / "kernel", kernel_events,
                                                   sysc, self.devices(), perf.PROCNAMES):
                lttng.run_lttng(cmd)
            lttng.run_lttng(["start", name])
            self._ksession = name
            return evs
        return []

    def kernel_release(self):
        """End the traced runs' perf or tracefs instance before a run that is not traced (disabled since
        the last traced run, it holds nothing to keep), waiting until it is gone: its tracepoints cost
        the calls until then."""
        if self.case_perf:
            self.case_perf.kill()
            self.case_perf = None
            shutil.rmtree(self.out / ".perf", ignore_errors=True)
        if self.case_ftrace:
            self.case_ftrace.stop()
            self.case_ftrace = None

    def kernel_stop(self):
        """Stop the kernel collector; returns what kernel_finish needs: {"perf": the stopped recorder}
        or {"lost": LTTng's discarded events and lost packets}."""
        if self.kernel == "perf" and self.case_perf:
            self.case_perf.disable()
            rec = types.SimpleNamespace(data=self.case_perf.dump(self._perf_out / "kernel.perf.data"))
            self.stopped_perf.append(rec)           # its data is deleted by discard() or kernel_finish()
            return {"perf": rec}
        if self.kernel == "ftrace" and self.case_ftrace:
            self.case_ftrace.disable()
            return {"ftrace": self.case_ftrace.dump(self._perf_out / "kernel.ftrace")}
        if self.kernel == "lttng":
            name = self._ksession
            lttng.run_lttng(["stop", name])
            st = lttng.channel_stats(name).get(lttng.KERNEL_CHANNEL, {})
            lttng.run_lttng(["destroy", name])
            self.sessions.remove(name)
            leftovers.forget("lttng_sessions", name)
            return {"lost": st.get("discarded_events", 0) + st.get("lost_packets", 0)}
        return {}

    def kernel_finish(self, out_dir, ust_dir, stopped):
        """Convert into out_dir/kernel, align clocks, count; returns (events, lost, per-event counts).
        stopped: kernel_stop()'s result."""
        kdir = out_dir / "kernel"
        if self.kernel in ("perf", "ftrace"):
            if self.kernel == "perf":
                raw = stopped["perf"].data                   # kernel.perf.data
                st = perf.stats(raw)
                samples, lost = st["samples"], st["lost"]
                perf.convert_to_ctf(raw, kdir)
            else:
                raw = stopped["ftrace"]                      # the ring's dump, a directory
                shutil.rmtree(kdir, ignore_errors=True)
                samples, lost = ftrace.convert_to_ctf(raw, kdir)
            clock = perf.ust_clock(ust_dir)
            if clock:
                perf.align_clock(kdir, clock)
            if self.p["keep_perf_data"]:
                if raw.parent != out_dir:
                    raw.replace(out_dir / raw.name)
            elif raw.is_dir():
                shutil.rmtree(raw, ignore_errors=True)
            else:
                raw.unlink(missing_ok=True)
            events, _, _ = bt_count(kdir)
            return events, lost, samples
        if self.kernel == "lttng":
            events, _, _ = bt_count(kdir)
            return events, stopped.get("lost", 0), {}
        return 0, 0, {}


    def keep_run(self, run, d):
        """The kept traced run's traces move to d/ust (and d/kernel, converted). Returns its kernel
        counts (events, lost, per-event counts)."""
        ust = d / "ust"
        shutil.rmtree(ust, ignore_errors=True)
        if run["ust"].is_dir():
            run["ust"].replace(ust)
        kernel = (0, 0, {})
        if "kernel" in run["got"]:
            if (run["dir"] / "kernel").is_dir():          # LTTng's kernel session output
                shutil.rmtree(d / "kernel", ignore_errors=True)
                (run["dir"] / "kernel").replace(d / "kernel")
            kernel = self.kernel_finish(d, ust, run["got"]["kernel"])
        return kernel

    def discard(self, d):
        """Delete the rounds' leftovers under d (traces not kept, perf data, logs of good runs)."""
        for rec in self.stopped_perf:
            if rec.data.parent.parent == d and rec.data.parent.name.startswith("repeat-"):
                rec.data.unlink(missing_ok=True)
        self.stopped_perf = [r for r in self.stopped_perf if r.data.exists()]
        for rdir in (*d.glob("repeat-*"), d / "clock-marks"):
            if not rdir.is_dir():
                continue
            for f in rdir.glob("*.log"):
                if f.stat().st_size:
                    f.replace(d / f.name)
            shutil.rmtree(rdir, ignore_errors=True)

