"""Timings taken interleaved (each repetition runs every configuration once,
in order, so that a change of load hits all of them alike), summarised by
medians and ranges."""

import collections
import statistics


def interleaved(reps, configurations, measure, after_each=None):
    """{configuration: [measure(configuration), one per repetition]}, the
    configurations run in turn `reps` times; after_each(rep) runs after each
    repetition."""
    samples = collections.defaultdict(list)
    for rep in range(reps):
        for configuration in configurations:
            samples[configuration].append(measure(configuration))
        if after_each:
            after_each(rep)
    return samples


def medians(samples):
    """{key: tuple of the medians of each field} of {key: [tuple]}."""
    return {key: tuple(statistics.median(s[i] for s in runs) for i in range(len(runs[0])))
            for key, runs in samples.items()}


def ranges(samples):
    """{key: tuple of (min, max) of each field} of {key: [tuple]}."""
    return {key: tuple((min(s[i] for s in runs), max(s[i] for s in runs))
                       for i in range(len(runs[0])))
            for key, runs in samples.items()}
