package hivecompaction.engine;

/** A group the columnar engine does not merge (nothing was written): the reason says why, and the
 *  group goes to the Spark SQL rewrite instead. */
final class CannotMerge extends Exception {
    private static final long serialVersionUID = 1L;

    CannotMerge(String reason) {
        super(reason);
    }
}
