package dev.ttpipe.actors.config;

import dev.ttpipe.schedules.ScheduleException;
import dev.ttpipe.schedules.Schedules;

/** Checks the schedule name and microbatch count against the schedule engine (by generating it). */
final class ScheduleCheck {
    private ScheduleCheck() {
    }

    static void check(TtpipeConfig cfg, ConfigProblems p) {
        TtpipeConfig.PipelineConfig pc = cfg.pipeline();
        String key = "multihost_config.pipeline_parallel_config.schedule";
        try {
            Schedules.canonicalName(pc.schedule);
        } catch (ScheduleException e) {
            p.add(key, pc.schedule, "one of " + String.join(", ", Schedules.names())
                    + YamlSection.didYouMean(pc.schedule, Schedules.names()));
            return;
        }
        try {
            Schedules.generate(pc.schedule, pc.ranks(), pc.numMicrobatches, pc.effectiveVirtualStages(), null);
        } catch (ScheduleException e) {
            String msg = e.getMessage();
            int nl = msg.indexOf('\n');
            String first = nl < 0 ? msg : msg.substring(0, nl);
            String at = first.contains("virtual") ? "multihost_config.pipeline_parallel_config.virtual_stages"
                    : first.contains("microbatch") ? "multihost_config.pipeline_parallel_config.num_microbatches" : key;
            p.add(at, first);
        }
    }
}
