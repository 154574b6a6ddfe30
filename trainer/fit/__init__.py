"""One fit: the session (set-up, epochs, finish), the step loop, the step counter, precision, schedules, preemption."""
