package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.OpsContractTest;
import org.junit.jupiter.api.BeforeEach;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** The ttnn backend over the reference bridge library, through JNA, against the backend contract. */
class TtnnOpsTest extends OpsContractTest {
    @BeforeEach
    void needsTheReferenceLibrary() {
        assumeTrue(BridgeLibrary.locate().isPresent(), "the reference bridge library was not built (no C compiler?); "
                + "tried " + BridgeLibrary.candidates(null));
    }

    @Override
    protected MeshDevice open(MeshShape shape, MeshOptions options) {
        return TtnnMeshDevice.open(shape, options);
    }

    @Override
    protected boolean appliesScaledRope() {
        return false;                          // ttpipe_rope of the C ABI takes theta only
    }
}
