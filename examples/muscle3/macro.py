"""The macro component of examples/muscle3: every step it sends its value to the micro
component and continues from the value that comes back."""

from libmuscle import Instance, Message
from ymmsl import Operator


def main() -> None:
    instance = Instance({Operator.O_I: ["state_out"], Operator.S: ["state_in"]})
    while instance.reuse_instance():
        steps = instance.get_setting("steps", "int")
        value = 1.0
        for step in range(steps):
            instance.send("state_out", Message(float(step), float(step + 1), value))
            value = instance.receive("state_in").data
        print(f"macro: {steps} steps done, value {value:.6f}", flush=True)


if __name__ == "__main__":
    main()
