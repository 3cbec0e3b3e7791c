"""``lazy``: an attribute computed on first use and then stored on the instance.

``functools.cached_property`` without its lock: before Python 3.12 it takes an RLock
at every first use, and a policy loss makes a dozen such first uses per call, a cost that
shows beside the small arrays of a minibatch. The kernels' objects are not shared between
threads.
"""


class lazy:
    # used as a decorator only: the attribute's name is the function's
    def __init__(self, fn):
        self.fn, self.__doc__, self.name = fn, fn.__doc__, fn.__name__

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        # stored under the same name: the next access finds it before this descriptor
        value = obj.__dict__[self.name] = self.fn(obj)
        return value
