"""An optimizer's checkpoint state: :meth:`~OptimizerState.state_dict` and back.

:class:`OptimizerState` is a mixin of :class:`~minitransformer.optim.optimizer.Optimizer`.
It turns what an optimizer has learned (the step counter ``t``, the learning rate,
the hyperparameters and the per-parameter arrays such as Adam's ``m`` and ``v``)
into plain Python values and host NumPy arrays, and loads them back: everything is
checked first (names, state keys, shapes, and every setting as the constructor
would check it), so a checkpoint that does not fit changes nothing. Its
``__repr__`` prints the same settings in one line.

The mixin imports nothing from :mod:`~minitransformer.optim.optimizer`: it relies on
the attributes every optimizer has (``params``, ``state``, ``t``, ``lr``,
``schedule``, ``_state_keys``, ``_hyper``) and validates a setting through
``self._check_setting``.
"""
from __future__ import annotations

import numpy as np  # host-side copies of the state arrays

from minitransformer import backend


def check_step_counter(value) -> int:
    """A saved step counter ``t``: a whole number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"the step counter t must be a whole number >= 0, got {value!r}")
    return int(value)


class OptimizerState:
    """Saving and loading an optimizer's state (a mixin of :class:`~minitransformer.optim.optimizer.Optimizer`)."""

    def state_dict(self) -> dict:
        """Everything needed to resume, as plain Python values and host NumPy arrays.

        ``{"type": class name, "t": int, "lr": float, <hyperparameters>,
        "schedule": repr or None, "steps": {name: int}, "param_groups": [{"names":
        [...], "lr": float or None, "weight_decay": float or None}], "state": {name:
        {key: numpy.ndarray}}}``: ``steps`` counts each parameter's updates (less
        than ``t`` for one that was frozen); a group's None is "the optimizer's own".
        The arrays are copies, so later steps do not change a saved dict. The
        schedule itself is not saved (it is a pure function of ``t``); its repr
        is kept for the record.
        """
        sd = {"type": type(self).__name__, "t": int(self.t), "lr": float(self.lr)}
        for key in self._hyper:
            value = getattr(self, key)
            sd[key] = list(value) if isinstance(value, tuple) else value
        sd["schedule"] = None if self.schedule is None else repr(self.schedule)
        sd["steps"] = dict(self.steps)
        sd["param_groups"] = [{"names": list(g["names"]), "lr": g["lr"], "weight_decay": g["weight_decay"]}
                              for g in self.param_groups]
        sd["state"] = {
            name: {key: np.array(backend.to_numpy(arr), copy=True) for key, arr in st.items()}
            for name, st in self.state.items()
        }
        return sd

    def load_state_dict(self, sd: dict) -> None:
        """Restore ``t``, ``lr``, the hyperparameters and the per-parameter state.

        Everything is checked first (optimizer type, parameter names, state
        keys, shapes, and the settings themselves: a saved ``lr`` of -1 or
        ``betas`` of 5 is refused as the constructor would refuse it); on any
        problem a ``ValueError`` lists all of them and nothing is loaded. Arrays are copied to the active backend and cast to
        each parameter's dtype. The schedule is kept as constructed.
        """
        problems = []
        if sd.get("type", type(self).__name__) != type(self).__name__:
            problems.append(f"optimizer type: expected {type(self).__name__}, got {sd['type']}")
        state = sd.get("state", {})
        missing = sorted(set(self.params) - set(state))
        unexpected = sorted(set(state) - set(self.params))
        if missing:
            problems.append("missing: " + ", ".join(missing))
        if unexpected:
            problems.append("unexpected: " + ", ".join(unexpected))
        for name, p in self.params.items():
            if name not in state:
                continue
            keys, want = sorted(state[name]), sorted(self._state_keys)
            if keys != want:
                problems.append(f"{name}: state keys {keys}, expected {want}")
                continue
            for key in want:
                shape = tuple(np.shape(state[name][key]))
                if shape != tuple(p.data.shape):
                    problems.append(f"{name}.{key}: shape {shape}, expected {tuple(p.data.shape)}")
        settings = {}
        for key in ("t", "lr", *self._hyper):
            if key in sd:
                try:
                    settings[key] = check_step_counter(sd[key]) if key == "t" else self._check_setting(key, sd[key])
                except ValueError as err:
                    problems.append(str(err))
        if "t" not in sd:
            problems.append("the step counter t is missing")
        steps, groups = self._check_steps_and_groups(sd, settings.get("t"), problems)
        if problems:
            raise ValueError(f"optimizer state dict does not fit this {type(self).__name__}: "
                             + "; ".join(problems))
        for name, p in self.params.items():
            self.state[name] = {
                key: backend.asarray(np.array(backend.to_numpy(arr), dtype=p.data.dtype,
                                              copy=True))  # (*p.shape)
                for key, arr in state[name].items()
            }
        self.t = settings.pop("t")
        self.steps = steps if steps is not None else {name: self.t for name in self.params}
        for g, saved in zip(self.param_groups, groups or ()):
            g["weight_decay"] = saved["weight_decay"]
            if g["schedule"] is None:
                g["lr"] = saved["lr"]
        for key, value in settings.items():  # lr and the hyperparameters, validated above
            setattr(self, key, value)

    def _check_steps_and_groups(self, sd: dict, t, problems: list) -> tuple:
        """Validate ``sd["steps"]`` and ``sd["param_groups"]`` (both optional: a
        checkpoint from before they existed has every step at ``t`` and one group).
        Appends to ``problems``; returns ``(steps or None, groups or None)``."""
        steps, groups = sd.get("steps"), sd.get("param_groups")
        if steps is not None:
            ok = (isinstance(steps, dict) and set(steps) == set(self.params)
                  and all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= (t or 0)
                          for k in steps.values()))
            if not ok:
                problems.append("steps must give every parameter a whole number of updates between 0 and t")
                steps = None
            else:
                steps = {name: int(steps[name]) for name in self.params}
        if groups is not None:
            names = [list(g.get("names", ())) if isinstance(g, dict) else None for g in groups]
            if names != [list(g["names"]) for g in self.param_groups]:
                problems.append(f"parameter groups: saved {len(groups)} group(s) of other parameters than "
                                f"this optimizer's {len(self.param_groups)}; build the groups as when saving")
                return steps, None
            checked = []
            for i, g in enumerate(groups):
                try:
                    lr = None if g.get("lr") is None else self._check_setting("lr", g["lr"])
                    wd = None if g.get("weight_decay") is None else self._check_setting("weight_decay",
                                                                                      g["weight_decay"])
                    checked.append({"lr": lr, "weight_decay": wd})
                except ValueError as err:
                    problems.append(f"parameter group {i}: {err}")
            groups = checked
        return steps, groups

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._hyper)
        lr = repr(self.schedule) if self.schedule is not None else repr(self.lr)
        groups = f", {len(self.param_groups)} groups" if len(self.param_groups) > 1 else ""
        return f"{type(self).__name__}({len(self.params)} parameters{groups}, lr={lr}, {hyper}, t={self.t})"
